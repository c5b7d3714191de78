"""What the gateway cannot honour, on each API, is refused before it reaches the episode, with a
status and a message naming the field and the fix (OpenAI's error shape, or Anthropic's on the
Messages API); unknown paths and methods are answered naming the endpoints; Anthropic's clients
authenticate with `x-api-key`; an ended episode is answered 410 naming how it ended. Driven over
HTTP against a session on a recording episode."""

from __future__ import annotations

import httpx
from gateway_api_support import ANTHROPIC_TOOLS, CHAT_TOOLS, RESPONSES_TOOLS, Recording

from aworld_train.rollout.gateway.server import ENDPOINTS, gateway

USER = {"role": "user", "content": "Go."}
# (path, case) -> (the request, the field named: the error's `param`, or on the Messages API what its
# message starts with)
REFUSALS = {
    # chat completions
    ("/chat/completions", "logit_bias"): ({"messages": [USER], "logit_bias": {"42": 3}}, "logit_bias"),
    ("/chat/completions", "frequency_penalty"): (
        {"messages": [USER], "frequency_penalty": 0.5},
        "frequency_penalty",
    ),
    ("/chat/completions", "presence_penalty"): (
        {"messages": [USER], "presence_penalty": -1},
        "presence_penalty",
    ),
    ("/chat/completions", "tool_choice"): (
        {"messages": [USER], "tool_choice": {"type": "allowed_tools"}},
        "tool_choice",
    ),
    ("/chat/completions", "tool_choice named"): (
        {
            "messages": [USER],
            "tools": CHAT_TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "search"}},
        },
        "tool_choice",
    ),
    ("/chat/completions", "response_format"): (
        {"messages": [USER], "response_format": {"type": "xml"}},
        "response_format",
    ),
    ("/completions", "logit_bias"): ({"prompt": "Go", "logit_bias": {"1": -100}}, "logit_bias"),
    ("/reward", "reward"): ({"reward": "0.5"}, "reward"),
    # the Responses API
    ("/responses", "web_search"): ({"input": "Go.", "tools": [{"type": "web_search"}]}, "tools.0.type"),
    ("/responses", "background"): ({"input": "Go.", "background": True}, "background"),
    ("/responses", "conversation"): ({"input": "Go.", "conversation": "conv_1"}, "conversation"),
    ("/responses", "prompt"): ({"input": "Go.", "prompt": {"id": "pmpt_1"}}, "prompt"),
    ("/responses", "truncation"): ({"input": "Go.", "truncation": "auto"}, "truncation"),
    ("/responses", "include"): ({"input": "Go.", "include": ["file_search_call.results"]}, "include.0"),
    ("/responses", "top_logprobs"): ({"input": "Go.", "top_logprobs": 3}, "top_logprobs"),
    ("/responses", "previous_response_id"): (
        {"input": "Go.", "previous_response_id": "resp_nope"},
        "previous_response_id",
    ),
    ("/responses", "item_reference"): (
        {"input": [{"type": "item_reference", "id": "msg_1"}]},
        "input.0.type",
    ),
    ("/responses", "image"): (
        {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]},
        "input.0.content.0.type",
    ),
    ("/responses", "tool_choice"): (
        {"input": "Go.", "tool_choice": {"type": "web_search_preview"}},
        "tool_choice",
    ),
    ("/responses", "tool_choice named"): (
        {"input": "Go.", "tools": RESPONSES_TOOLS, "tool_choice": {"type": "function", "name": "search"}},
        "tool_choice",
    ),
    ("/responses", "text.format"): (
        {"input": "Go.", "text": {"format": {"type": "xml"}}},
        "text.format.type",
    ),
    ("/responses", "function_call without call_id"): (
        {"input": [{"type": "function_call", "name": "calculate", "arguments": "{}"}]},
        "input.0.call_id",
    ),
    # the Messages API
    ("/messages", "server tool"): (
        {
            "max_tokens": 9,
            "messages": [USER],
            "tools": [{"type": "web_search_20250305", "name": "web_search"}],
        },
        "tools.0.type",
    ),
    ("/messages", "image"): (
        {
            "max_tokens": 9,
            "messages": [
                {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "u"}}]}
            ],
        },
        "messages.0.content.0.type",
    ),
    ("/messages", "prefill"): (
        {"max_tokens": 9, "messages": [USER, {"role": "assistant", "content": "The answer is"}]},
        "messages.1",
    ),
    ("/messages", "container"): ({"max_tokens": 9, "messages": [USER], "container": "c1"}, "container"),
    ("/messages", "mcp_servers"): (
        {"max_tokens": 9, "messages": [USER], "mcp_servers": [{"url": "u"}]},
        "mcp_servers",
    ),
    ("/messages", "tool_choice named"): (
        {
            "max_tokens": 9,
            "messages": [USER],
            "tools": ANTHROPIC_TOOLS,
            "tool_choice": {"type": "tool", "name": "search"},
        },
        "tool_choice.name",
    ),
    ("/messages", "max_tokens"): ({"messages": [USER]}, "max_tokens"),
}


async def test_what_the_gateway_cannot_honour_is_refused_naming_the_field_and_the_fix(recorded_session):
    opened, recording, http = recorded_session
    got = {case: await http.post(case[0], json=body) for case, (body, _) in REFUSALS.items()}
    assert not recording.calls  # nothing refused reached the episode
    assert {case: r.status_code for case, r in got.items()} == {case: 400 for case in REFUSALS}
    openai_errors = {case: r.json()["error"] for case, r in got.items() if case[0] != "/messages"}
    params = {case: e["param"] for case, e in openai_errors.items()}
    assert params == {case: field for case, (_, field) in REFUSALS.items() if case[0] != "/messages"}
    messages = {case: e["message"] for case, e in openai_errors.items()}
    for name in ("logit_bias", "frequency_penalty", "presence_penalty"):
        assert "under the policy alone" in messages[("/chat/completions", name)]
        assert f"remove {name}" in messages[("/chat/completions", name)]
    assert (
        "'search' is not among the request's tools ('calculate')"
        in messages[("/responses", "tool_choice named")]
    )
    assert "send a number" in messages[("/reward", "reward")]
    assert "'web_search' tools are not served" in messages[("/responses", "web_search")]
    assert (
        "no response 'resp_nope' was made in this session" in messages[("/responses", "previous_response_id")]
    )
    assert "the policy reads text" in messages[("/responses", "image")]
    # the Messages API answers in Anthropic's error shape, its message naming the field
    anthropic_errors = {case[1]: r.json() for case, r in got.items() if case[0] == "/messages"}
    assert all(
        e["type"] == "error" and e["error"]["type"] == "invalid_request_error"
        for e in anthropic_errors.values()
    )
    starts = {case: e["error"]["message"].split(":")[0] for case, e in anthropic_errors.items()}
    assert starts == {case[1]: field for case, (_, field) in REFUSALS.items() if case[0] == "/messages"}
    assert "run on Anthropic's side" in anthropic_errors["server tool"]["error"]["message"]
    assert "a prefill" in anthropic_errors["prefill"]["error"]["message"]


async def test_unknown_paths_and_methods_are_answered_in_json_naming_the_endpoints(recorded_session):
    opened, recording, http = recorded_session
    under_session = await http.post("/embeddings", json={"input": "x"})
    nowhere = await http.post(httpx.URL(opened.base_url).copy_with(path="/v1/chat/completions"), json={})
    wrong_method = await http.get("/chat/completions")
    anthropic_wrong_method = await http.get("/messages")
    for answer in (under_session, nowhere):
        assert answer.status_code == 404
        error = answer.json()["error"]
        assert error["type"] == "not_found_error" and "no such endpoint" in error["message"]
        assert all(endpoint in error["message"] for endpoint in ENDPOINTS)
    assert "POST /v1/chat/completions" in nowhere.json()["error"]["message"]
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"
    assert "GET /sessions/" in wrong_method.json()["error"]["message"]
    assert "POST /responses" in wrong_method.json()["error"]["message"]
    assert anthropic_wrong_method.status_code == 405 and anthropic_wrong_method.json()["type"] == "error"


async def test_anthropic_clients_authenticate_with_x_api_key_and_get_anthropic_errors(recorded_session):
    opened, recording, http = recorded_session
    body = {"max_tokens": 9, "messages": [{"role": "user", "content": "Go."}]}
    async with httpx.AsyncClient(base_url=opened.base_url, timeout=30) as bare:
        good = await bare.post("/messages", json=body, headers={"x-api-key": opened.token})
        bad = await bare.post("/messages", json=body, headers={"x-api-key": "nope"})
        chat_with_key = await bare.post(
            "/chat/completions", json={"messages": body["messages"]}, headers={"x-api-key": opened.token}
        )
    assert good.status_code == 200 and good.json()["content"] == [{"type": "text", "text": "ok"}]
    assert good.json()["stop_reason"] == "end_turn" and good.json()["usage"] == {
        "input_tokens": 3,
        "output_tokens": 1,
    }
    assert bad.status_code == 401 and bad.json()["error"]["type"] == "authentication_error"
    assert "x-api-key" in bad.json()["error"]["message"]
    assert chat_with_key.status_code == 200


async def test_an_ended_episode_is_answered_410_naming_how_it_ended():
    ended = Recording(
        ended=("malformed_tool_call", "line 1: Expecting property name enclosed in double quotes")
    )
    opened = gateway().open(ended)
    user = {"role": "user", "content": "Go."}
    async with httpx.AsyncClient(
        base_url=opened.base_url, headers={"Authorization": f"Bearer {opened.token}"}, timeout=30
    ) as http:
        chat = await http.post("/chat/completions", json={"messages": [user]})
        responses = await http.post("/responses", json={"input": "Go."})
        messages = await http.post("/messages", json={"max_tokens": 9, "messages": [user]})
    gateway().close(opened)
    why = (
        "the episode ended as malformed_tool_call: line 1: Expecting property name enclosed in double quotes"
    )
    for answer in (chat, responses):
        assert answer.status_code == 410
        assert answer.json()["error"]["type"] == "episode_ended" and why in answer.json()["error"]["message"]
    assert messages.status_code == 410 and why in messages.json()["error"]["message"]
    assert not ended.calls
