"""The gateway's other APIs: OpenAI's Responses API and Anthropic's Messages API keep the same exact
ledger as chat completions (driven by the real `openai` and `anthropic` SDKs against an episode of
a scripted policy); each API's options reach the call; what the gateway cannot honour, unknown
paths and ended episodes are answered with a status and a message naming the field and the fix."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from anthropic import AsyncAnthropic
from gateway_support import SDKAgent, anthropic_client
from openai import AsyncOpenAI

from aworld_train.rollout.episodes.driver import Reply
from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.gateway.server import ENDPOINTS, gateway
from aworld_train.rollout.policies.client import ScriptedPolicy

SCHEMA = {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}
RESPONSES_TOOLS = [
    {
        "type": "function",
        "name": "calculate",
        "description": "Evaluate an arithmetic expression",
        "parameters": SCHEMA,
        "strict": True,
    }
]
ANTHROPIC_TOOLS = [
    {"name": "calculate", "description": "Evaluate an arithmetic expression", "input_schema": SCHEMA}
]
CHAT_TOOLS = [{"type": "function", "function": {"name": "calculate", "parameters": SCHEMA}}]
TASK = Task("a", ["What is 2 + 3?"])


def call(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def calculator(tokenizer, im_end) -> ScriptedPolicy:
    """Calls the calculator, then answers with its result."""
    return ScriptedPolicy(tokenizer, [call("calculate", {"expression": "2 + 3"}), "It is 5."], im_end)


def one_exact_segment(traj, policy: ScriptedPolicy, tokenizer) -> None:
    """The whole episode is one segment: its sampled ids (mask 1) are exactly the policy's, each later
    prompt extends it, and the tool's result is in it as prompt (mask 0), never as loss."""
    assert traj.status == "ok", traj.error
    (segment,) = traj.segments
    assert traj.history_rewrites == 0
    ids, mask = segment.response_ids, segment.response_mask
    assert [t for t, m in zip(ids, mask, strict=True) if m] == [
        t for g in policy.generations for t in g.token_ids
    ]
    for prompt in policy.prompts[1:]:
        assert segment.ids[: len(prompt)] == prompt
    unmasked = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if not m])
    assert "<tool_response>\n5\n</tool_response>" in unmasked
    assert [(c.name, c.arguments, c.result) for c in traj.tool_calls] == [
        ("calculate", {"expression": "2 + 3"}, "5")
    ]
    assert traj.final_answer == "It is 5."


async def test_a_responses_api_agent_echoing_its_items_keeps_one_exact_ledger(
    tokenizer, im_end, make_runtime
):
    policy = calculator(tokenizer, im_end)
    got: dict = {}

    async def body(client: AsyncOpenAI, text: str, session) -> None:
        items: list = [{"role": "user", "content": text}]
        first = await client.responses.create(
            model="m", instructions="You compute.", input=items, tools=RESPONSES_TOOLS
        )
        got["first"] = first
        items += [item.model_dump(mode="json", exclude_none=True, by_alias=True) for item in first.output]
        items.append({"type": "function_call_output", "call_id": first.output[0].call_id, "output": "5"})
        got["final"] = await client.responses.create(
            model="m", instructions="You compute.", input=items, tools=RESPONSES_TOOLS
        )

    traj = await Episode(SDKAgent(body), TASK, make_runtime(policy)).run()
    one_exact_segment(traj, policy, tokenizer)
    first, final = got["first"], got["final"]
    assert first.status == "completed" and [o.type for o in first.output] == ["function_call"]
    (function_call,) = first.output
    assert function_call.name == "calculate" and json.loads(function_call.arguments) == {
        "expression": "2 + 3"
    }
    assert function_call.call_id == traj.tool_calls[0].id and function_call.id.startswith("fc_")
    assert final.output_text == "It is 5." and final.id.startswith("resp_")
    assert final.usage.input_tokens == len(policy.prompts[1])
    assert final.usage.output_tokens == len(policy.generations[1].token_ids)
    assert "You compute." in tokenizer.decode(policy.prompts[0])  # the instructions: the system message


async def test_a_streamed_responses_api_agent_continues_by_previous_response_id(
    tokenizer, im_end, make_runtime
):
    policy = calculator(tokenizer, im_end)
    got: dict = {}

    async def body(client: AsyncOpenAI, text: str, session) -> None:
        async with client.responses.stream(
            model="m", instructions="You compute.", input=text, tools=RESPONSES_TOOLS
        ) as stream:
            got["first_events"] = [event.type async for event in stream]
            first = await stream.get_final_response()
        got["call"] = first.output[0]
        output = {"type": "function_call_output", "call_id": first.output[0].call_id, "output": "5"}
        stream = await client.responses.create(
            model="m",
            instructions="You compute.",
            previous_response_id=first.id,
            input=[output],
            tools=RESPONSES_TOOLS,
            stream=True,
        )
        got["final_events"] = [event async for event in stream]

    traj = await Episode(SDKAgent(body), TASK, make_runtime(policy)).run()
    one_exact_segment(traj, policy, tokenizer)
    assert got["first_events"] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert json.loads(got["call"].arguments) == {"expression": "2 + 3"}
    final = got["final_events"]
    assert [e.type for e in final] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in final] == list(range(len(final)))
    assert final[-1].response.output_text == "It is 5." == final[4].delta
    assert final[-1].response.previous_response_id == final[0].response.previous_response_id


async def test_an_anthropic_agent_round_trips_a_tool_use_in_one_exact_segment(
    tokenizer, im_end, make_runtime
):
    policy = calculator(tokenizer, im_end)
    got: dict = {}

    async def body(client: AsyncAnthropic, text: str, session) -> None:
        messages: list = [{"role": "user", "content": text}]
        first = await client.messages.create(
            model="m", max_tokens=256, system="You compute.", messages=messages, tools=ANTHROPIC_TOOLS
        )
        got["first"] = first
        (use,) = first.content
        messages.append(
            {
                "role": "assistant",
                "content": [b.model_dump(mode="json", exclude_none=True) for b in first.content],
            }
        )
        messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "5"}]}
        )
        async with client.messages.stream(
            model="m", max_tokens=256, system="You compute.", messages=messages, tools=ANTHROPIC_TOOLS
        ) as stream:
            got["events"] = [event.type async for event in stream]
            got["final"] = await stream.get_final_message()

    traj = await Episode(SDKAgent(body, anthropic_client), TASK, make_runtime(policy)).run()
    one_exact_segment(traj, policy, tokenizer)
    first, final = got["first"], got["final"]
    assert first.stop_reason == "tool_use" and first.id.startswith("msg_")
    (use,) = first.content
    assert (use.type, use.name, use.input) == ("tool_use", "calculate", {"expression": "2 + 3"})
    assert use.id == traj.tool_calls[0].id
    assert first.usage.input_tokens == len(policy.prompts[0])
    assert final.stop_reason == "end_turn" and [(b.type, b.text) for b in final.content] == [
        ("text", "It is 5.")
    ]
    assert got["events"][0] == "message_start" and got["events"][-1] == "message_stop"
    assert "You compute." in tokenizer.decode(policy.prompts[0])


async def test_a_streamed_anthropic_tool_use_carries_its_input(tokenizer, im_end, make_runtime):
    policy = ScriptedPolicy(tokenizer, [call("calculate", {"expression": "2 + 3"})], im_end)
    got: dict = {}

    async def body(client: AsyncAnthropic, text: str, session) -> None:
        async with client.messages.stream(
            model="m", max_tokens=256, messages=[{"role": "user", "content": text}], tools=ANTHROPIC_TOOLS
        ) as stream:
            got["message"] = await stream.get_final_message()

    await Episode(SDKAgent(body, anthropic_client), TASK, make_runtime(policy, max_assistant_turns=1)).run()
    message = got["message"]
    assert message.stop_reason == "tool_use"
    assert [(b.type, b.name, b.input) for b in message.content] == [
        ("tool_use", "calculate", {"expression": "2 + 3"})
    ]


class Recording:
    """An episode that answers every call with `reply` and keeps each call's messages, tools and
    options; `ended` is what its `ended()` says."""

    def __init__(self, reply: Reply | None = None, ended: tuple[str, str | None] | None = None) -> None:
        self.reply = reply or Reply(id="r", content="ok", usage={"prompt_tokens": 3, "completion_tokens": 1})
        self.calls: list[tuple] = []
        self.end = ended

    def check_call(self, agent="", messages=None, tools=None, prompt=None, options=None) -> None:
        pass

    def ended(self):
        return self.end

    async def complete(self, messages, tools, agent="", options=None) -> Reply:
        self.calls.append((messages, tools, options))
        return self.reply


@pytest.fixture
async def session():
    recording = Recording()
    opened = gateway().open(recording)
    headers = {"Authorization": f"Bearer {opened.token}"}
    async with httpx.AsyncClient(base_url=opened.base_url, headers=headers, timeout=30) as http:
        yield opened, recording, http
    gateway().close(opened)


async def test_each_api_maps_its_options_onto_the_call(session):
    opened, recording, http = session
    user = {"role": "user", "content": "Go."}
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    requests = {
        "/chat/completions": [
            {
                "messages": [user],
                "tools": CHAT_TOOLS,
                "tool_choice": "required",
                "parallel_tool_calls": False,
            },
            {
                "messages": [user],
                "tools": CHAT_TOOLS,
                "tool_choice": {"type": "function", "function": {"name": "calculate"}},
            },
            {
                "messages": [user],
                "tools": CHAT_TOOLS,
                "tool_choice": "none",
                "response_format": {"type": "text"},
            },
            {
                "messages": [user],
                "response_format": {"type": "json_object"},
                "temperature": 0.2,
                "top_p": 0.5,
            },
            {
                "messages": [user],
                "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
            },
        ],
        "/responses": [
            {
                "input": "Go.",
                "tools": RESPONSES_TOOLS,
                "tool_choice": "required",
                "parallel_tool_calls": False,
            },
            {
                "input": "Go.",
                "tools": RESPONSES_TOOLS,
                "tool_choice": {"type": "function", "name": "calculate"},
            },
            {
                "input": "Go.",
                "max_output_tokens": 7,
                "text": {"format": {"type": "json_object"}},
                "store": False,
            },
            {
                "input": "Go.",
                "text": {"format": {"type": "json_schema", "name": "a", "schema": schema}},
                "include": ["message.output_text.logprobs", "reasoning.encrypted_content"],
                "temperature": 0.3,
            },
        ],
        "/messages": [
            {
                "max_tokens": 9,
                "messages": [user],
                "tools": ANTHROPIC_TOOLS,
                "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
                "stop_sequences": ["END"],
                "top_k": 5,
            },
            {
                "max_tokens": 9,
                "messages": [user],
                "tools": ANTHROPIC_TOOLS,
                "tool_choice": {"type": "tool", "name": "calculate"},
            },
            {"max_tokens": 9, "messages": [user], "tool_choice": {"type": "none"}, "temperature": 1.0},
            {
                "max_tokens": 9,
                "messages": [user],
                "output_config": {"format": {"type": "json_schema", "schema": schema}},
            },
        ],
    }
    for path, bodies in requests.items():
        for body in bodies:
            answer = await http.post(path, json=body)
            assert answer.status_code == 200, (path, answer.text)
    options = [
        (o.tool_choice, o.tool_name, o.parallel_tool_calls, o.json_schema, o.max_tokens, o.stop, o.logprobs)
        for _, _, o in recording.calls
    ]
    assert options == [
        ("required", None, False, None, None, (), False),
        ("function", "calculate", True, None, None, (), False),
        ("none", None, True, None, None, (), False),
        ("auto", None, True, {"type": "object"}, None, (), False),
        ("auto", None, True, schema, None, (), False),
        ("required", None, False, None, None, (), False),
        ("function", "calculate", True, None, None, (), False),
        ("auto", None, True, {"type": "object"}, 7, (), False),
        ("auto", None, True, schema, None, (), True),
        ("required", None, False, None, 9, ("END",), False),
        ("function", "calculate", True, None, 9, (), False),
        ("none", None, True, None, 9, (), False),
        ("auto", None, True, schema, 9, (), False),
    ]
    # every API's tools reach the call as the same chat tools
    chat_tools = [tools for _, tools, _ in recording.calls if tools]
    assert all(
        [t["function"]["name"] for t in tools] == ["calculate"]
        and tools[0]["function"]["parameters"] == SCHEMA
        for tools in chat_tools
    )


async def test_responses_and_messages_inputs_become_the_chat_messages_a_chat_client_sends(session):
    opened, recording, http = session
    call_item = {
        "type": "function_call",
        "call_id": "c1",
        "name": "calculate",
        "arguments": '{"expression": "1"}',
    }
    await http.post(
        "/responses",
        json={
            "instructions": "Be exact.",
            "input": [
                {"role": "developer", "content": "Use tools."},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Go."}]},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {
                    "type": "message",
                    "role": "assistant",
                    "id": "msg_1",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "Let me see.", "annotations": []}],
                },
                call_item,
                {**call_item, "call_id": "c2"},
                {"type": "function_call_output", "call_id": "c1", "output": "1"},
                {
                    "type": "function_call_output",
                    "call_id": "c2",
                    "output": [{"type": "input_text", "text": "2"}],
                },
            ],
        },
    )
    tool_call = {"type": "function", "function": {"name": "calculate", "arguments": '{"expression": "1"}'}}
    expected = [
        {"role": "system", "content": "Be exact."},
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Go."},
        {
            "role": "assistant",
            "content": "Let me see.",
            "tool_calls": [{"id": "c1", **tool_call}, {"id": "c2", **tool_call}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "1"},
        {"role": "tool", "tool_call_id": "c2", "content": "2"},
    ]
    assert recording.calls[-1][0] == expected
    await http.post(
        "/messages",
        json={
            "max_tokens": 9,
            "system": [{"type": "text", "text": "Be exact."}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Go."}]},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hm", "signature": "s"},
                        {"type": "text", "text": "Let me see."},
                        {"type": "tool_use", "id": "c1", "name": "calculate", "input": {"expression": "1"}},
                        {"type": "tool_use", "id": "c2", "name": "calculate", "input": {"expression": "1"}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "c1", "content": "1"},
                        {
                            "type": "tool_result",
                            "tool_use_id": "c2",
                            "content": [{"type": "text", "text": "2"}],
                        },
                        {"type": "text", "text": "Now add them."},
                    ],
                },
            ],
        },
    )
    assert recording.calls[-1][0] == [
        expected[0],
        *expected[2:],
        {"role": "user", "content": "Now add them."},
    ]


async def test_what_the_gateway_cannot_honour_is_refused_naming_the_field_and_the_fix(session):
    opened, recording, http = session
    user = {"role": "user", "content": "Go."}
    cases = {
        # chat completions
        ("/chat/completions", "logit_bias"): {"messages": [user], "logit_bias": {"42": 3}},
        ("/chat/completions", "frequency_penalty"): {"messages": [user], "frequency_penalty": 0.5},
        ("/chat/completions", "presence_penalty"): {"messages": [user], "presence_penalty": -1},
        ("/chat/completions", "tool_choice"): {"messages": [user], "tool_choice": {"type": "allowed_tools"}},
        ("/chat/completions", "tool_choice named"): {
            "messages": [user],
            "tools": CHAT_TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "search"}},
        },
        ("/chat/completions", "response_format"): {"messages": [user], "response_format": {"type": "xml"}},
        ("/completions", "logit_bias"): {"prompt": "Go", "logit_bias": {"1": -100}},
        ("/reward", "reward"): {"reward": "0.5"},
        # the Responses API
        ("/responses", "web_search"): {"input": "Go.", "tools": [{"type": "web_search"}]},
        ("/responses", "background"): {"input": "Go.", "background": True},
        ("/responses", "conversation"): {"input": "Go.", "conversation": "conv_1"},
        ("/responses", "prompt"): {"input": "Go.", "prompt": {"id": "pmpt_1"}},
        ("/responses", "truncation"): {"input": "Go.", "truncation": "auto"},
        ("/responses", "include"): {"input": "Go.", "include": ["file_search_call.results"]},
        ("/responses", "top_logprobs"): {"input": "Go.", "top_logprobs": 3},
        ("/responses", "previous_response_id"): {"input": "Go.", "previous_response_id": "resp_nope"},
        ("/responses", "item_reference"): {"input": [{"type": "item_reference", "id": "msg_1"}]},
        ("/responses", "image"): {
            "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]
        },
        ("/responses", "tool_choice"): {"input": "Go.", "tool_choice": {"type": "web_search_preview"}},
        ("/responses", "tool_choice named"): {
            "input": "Go.",
            "tools": RESPONSES_TOOLS,
            "tool_choice": {"type": "function", "name": "search"},
        },
        ("/responses", "text.format"): {"input": "Go.", "text": {"format": {"type": "xml"}}},
        ("/responses", "function_call without call_id"): {
            "input": [{"type": "function_call", "name": "calculate", "arguments": "{}"}]
        },
        # the Messages API
        ("/messages", "server tool"): {
            "max_tokens": 9,
            "messages": [user],
            "tools": [{"type": "web_search_20250305", "name": "web_search"}],
        },
        ("/messages", "image"): {
            "max_tokens": 9,
            "messages": [
                {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "u"}}]}
            ],
        },
        ("/messages", "prefill"): {
            "max_tokens": 9,
            "messages": [user, {"role": "assistant", "content": "The answer is"}],
        },
        ("/messages", "container"): {"max_tokens": 9, "messages": [user], "container": "c1"},
        ("/messages", "mcp_servers"): {"max_tokens": 9, "messages": [user], "mcp_servers": [{"url": "u"}]},
        ("/messages", "tool_choice named"): {
            "max_tokens": 9,
            "messages": [user],
            "tools": ANTHROPIC_TOOLS,
            "tool_choice": {"type": "tool", "name": "search"},
        },
        ("/messages", "max_tokens"): {"messages": [user]},
    }
    got = {case: await http.post(case[0], json=body) for case, body in cases.items()}
    assert not recording.calls  # nothing refused reached the episode
    assert {case: r.status_code for case, r in got.items()} == {case: 400 for case in cases}
    openai_errors = {case: r.json()["error"] for case, r in got.items() if case[0] != "/messages"}
    params = {case: e["param"] for case, e in openai_errors.items()}
    assert params == {
        ("/chat/completions", "logit_bias"): "logit_bias",
        ("/chat/completions", "frequency_penalty"): "frequency_penalty",
        ("/chat/completions", "presence_penalty"): "presence_penalty",
        ("/chat/completions", "tool_choice"): "tool_choice",
        ("/chat/completions", "tool_choice named"): "tool_choice",
        ("/chat/completions", "response_format"): "response_format",
        ("/completions", "logit_bias"): "logit_bias",
        ("/reward", "reward"): "reward",
        ("/responses", "web_search"): "tools.0.type",
        ("/responses", "background"): "background",
        ("/responses", "conversation"): "conversation",
        ("/responses", "prompt"): "prompt",
        ("/responses", "truncation"): "truncation",
        ("/responses", "include"): "include.0",
        ("/responses", "top_logprobs"): "top_logprobs",
        ("/responses", "previous_response_id"): "previous_response_id",
        ("/responses", "item_reference"): "input.0.type",
        ("/responses", "image"): "input.0.content.0.type",
        ("/responses", "tool_choice"): "tool_choice",
        ("/responses", "tool_choice named"): "tool_choice",
        ("/responses", "text.format"): "text.format.type",
        ("/responses", "function_call without call_id"): "input.0.call_id",
    }
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
    assert starts == {
        "server tool": "tools.0.type",
        "image": "messages.0.content.0.type",
        "prefill": "messages.1",
        "container": "container",
        "mcp_servers": "mcp_servers",
        "tool_choice named": "tool_choice.name",
        "max_tokens": "max_tokens",
    }
    assert "run on Anthropic's side" in anthropic_errors["server tool"]["error"]["message"]
    assert "a prefill" in anthropic_errors["prefill"]["error"]["message"]


async def test_unknown_paths_and_methods_are_answered_in_json_naming_the_endpoints(session):
    opened, recording, http = session
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


async def test_anthropic_clients_authenticate_with_x_api_key_and_get_anthropic_errors(session):
    opened, recording, http = session
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


async def test_a_call_whose_answer_ends_the_episode_gets_410_with_the_episodes_reason(
    tokenizer, im_end, make_runtime
):
    policy = ScriptedPolicy(tokenizer, ["<tool_call>\n{not json}\n</tool_call>"], im_end)
    got: dict = {}
    http = httpx.AsyncClient(timeout=30)

    async def body(client: AsyncOpenAI, text: str, session) -> None:
        request = http.post(
            f"{session.base_url}/responses",
            json={"input": text, "tools": RESPONSES_TOOLS},
            headers={"Authorization": f"Bearer {session.token}"},
        )
        # the call outlives the agent's turn, which the episode's end cancels
        got["call"] = asyncio.ensure_future(request)
        await asyncio.shield(got["call"])

    traj = await Episode(SDKAgent(body), TASK, make_runtime(policy)).run()
    answer = await got["call"]
    await http.aclose()
    assert traj.status == "malformed_tool_call" and traj.error
    assert answer.status_code == 410
    assert answer.json()["error"]["message"] == (
        f"the episode ended as malformed_tool_call: {traj.error}; no more calls are answered"
    )
