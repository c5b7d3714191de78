"""The gateway's APIs reach the episode alike: each API's options (tool choice, parallel calls,
structured output, token limit, stop sequences, logprobs) become the call's options, and its tools
the same chat tools; a Responses API input and a Messages API conversation become the chat messages
a chat client would have sent. Driven over HTTP against a session on a recording episode."""

from __future__ import annotations

from gateway_api_support import ANTHROPIC_TOOLS, CHAT_TOOLS, RESPONSES_TOOLS, SCHEMA

USER = {"role": "user", "content": "Go."}
ANSWER_SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}
# (path, request, the call's options: tool_choice, tool_name, parallel_tool_calls, json_schema,
# max_tokens, stop, logprobs)
OPTIONS = [
    (
        "/chat/completions",
        {"messages": [USER], "tools": CHAT_TOOLS, "tool_choice": "required", "parallel_tool_calls": False},
        ("required", None, False, None, None, (), False),
    ),
    (
        "/chat/completions",
        {
            "messages": [USER],
            "tools": CHAT_TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "calculate"}},
        },
        ("function", "calculate", True, None, None, (), False),
    ),
    (
        "/chat/completions",
        {"messages": [USER], "tools": CHAT_TOOLS, "tool_choice": "none", "response_format": {"type": "text"}},
        ("none", None, True, None, None, (), False),
    ),
    (
        "/chat/completions",
        {"messages": [USER], "response_format": {"type": "json_object"}, "temperature": 0.2, "top_p": 0.5},
        ("auto", None, True, {"type": "object"}, None, (), False),
    ),
    (
        "/chat/completions",
        {
            "messages": [USER],
            "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": ANSWER_SCHEMA}},
        },
        ("auto", None, True, ANSWER_SCHEMA, None, (), False),
    ),
    (
        "/responses",
        {"input": "Go.", "tools": RESPONSES_TOOLS, "tool_choice": "required", "parallel_tool_calls": False},
        ("required", None, False, None, None, (), False),
    ),
    (
        "/responses",
        {"input": "Go.", "tools": RESPONSES_TOOLS, "tool_choice": {"type": "function", "name": "calculate"}},
        ("function", "calculate", True, None, None, (), False),
    ),
    (
        "/responses",
        {"input": "Go.", "max_output_tokens": 7, "text": {"format": {"type": "json_object"}}, "store": False},
        ("auto", None, True, {"type": "object"}, 7, (), False),
    ),
    (
        "/responses",
        {
            "input": "Go.",
            "text": {"format": {"type": "json_schema", "name": "a", "schema": ANSWER_SCHEMA}},
            "include": ["message.output_text.logprobs", "reasoning.encrypted_content"],
            "temperature": 0.3,
        },
        ("auto", None, True, ANSWER_SCHEMA, None, (), True),
    ),
    (
        "/messages",
        {
            "max_tokens": 9,
            "messages": [USER],
            "tools": ANTHROPIC_TOOLS,
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "stop_sequences": ["END"],
            "top_k": 5,
        },
        ("required", None, False, None, 9, ("END",), False),
    ),
    (
        "/messages",
        {
            "max_tokens": 9,
            "messages": [USER],
            "tools": ANTHROPIC_TOOLS,
            "tool_choice": {"type": "tool", "name": "calculate"},
        },
        ("function", "calculate", True, None, 9, (), False),
    ),
    (
        "/messages",
        {"max_tokens": 9, "messages": [USER], "tool_choice": {"type": "none"}, "temperature": 1.0},
        ("none", None, True, None, 9, (), False),
    ),
    (
        "/messages",
        {
            "max_tokens": 9,
            "messages": [USER],
            "output_config": {"format": {"type": "json_schema", "schema": ANSWER_SCHEMA}},
        },
        ("auto", None, True, ANSWER_SCHEMA, 9, (), False),
    ),
]


async def test_each_api_maps_its_options_onto_the_call(recorded_session):
    opened, recording, http = recorded_session
    for path, body, _ in OPTIONS:
        answer = await http.post(path, json=body)
        assert answer.status_code == 200, (path, answer.text)
    options = [
        (o.tool_choice, o.tool_name, o.parallel_tool_calls, o.json_schema, o.max_tokens, o.stop, o.logprobs)
        for _, _, o in recording.calls
    ]
    assert options == [expected for _, _, expected in OPTIONS]
    # every API's tools reach the call as the same chat tools
    chat_tools = [tools for _, tools, _ in recording.calls if tools]
    assert all(
        [t["function"]["name"] for t in tools] == ["calculate"]
        and tools[0]["function"]["parameters"] == SCHEMA
        for tools in chat_tools
    )


CALL_ITEM = {
    "type": "function_call",
    "call_id": "c1",
    "name": "calculate",
    "arguments": '{"expression": "1"}',
}
# a Responses API input: instructions, a developer message, reasoning, the assistant's text and two
# calls, and their outputs (one as text, one as content parts)
RESPONSES_INPUT = {
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
        CALL_ITEM,
        {**CALL_ITEM, "call_id": "c2"},
        {"type": "function_call_output", "call_id": "c1", "output": "1"},
        {
            "type": "function_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": "2"}],
        },
    ],
}
TOOL_CALL = {"type": "function", "function": {"name": "calculate", "arguments": '{"expression": "1"}'}}
# the chat messages a chat client would have sent for it
RESPONSES_AS_CHAT = [
    {"role": "system", "content": "Be exact."},
    {"role": "system", "content": "Use tools."},
    {"role": "user", "content": "Go."},
    {
        "role": "assistant",
        "content": "Let me see.",
        "tool_calls": [{"id": "c1", **TOOL_CALL}, {"id": "c2", **TOOL_CALL}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "1"},
    {"role": "tool", "tool_call_id": "c2", "content": "2"},
]
# the same conversation on the Messages API (no developer message), thinking included, and a user
# text after the tool results
MESSAGES_INPUT = {
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
}


async def test_responses_and_messages_inputs_become_the_chat_messages_a_chat_client_sends(recorded_session):
    opened, recording, http = recorded_session
    await http.post("/responses", json=RESPONSES_INPUT)
    assert recording.calls[-1][0] == RESPONSES_AS_CHAT
    await http.post("/messages", json=MESSAGES_INPUT)
    assert recording.calls[-1][0] == [
        RESPONSES_AS_CHAT[0],
        *RESPONSES_AS_CHAT[2:],
        {"role": "user", "content": "Now add them."},
    ]
