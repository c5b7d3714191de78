"""The sentinel turns a chat template is asked to render: calls of two probe tools with typed
arguments, an answer, content and a thought, each made of words no template holds, so that where
each lands in the rendering says what the template writes there (calls/derivation.py,
calls/forcing.py, turns/ends.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aworld_train.rollout.tokens.calls.frame import value_kind

NAMES = ("zqfnone", "zqfntwo")
ONE = {"zqks": "zqvs"}
SECOND = {"zqkt": "zqvt"}
TYPED = {"zqks": "zqvs", "zqkn": 7351, "zqko": {"zqxa": "zqvx", "zqxb": 2}, "zqkl": ["zqvl", 3], "zqkb": True}
CONTENT, ANSWER, THOUGHT = "zqcontent", "zqanswer", "zqthought"
SCHEMA_TYPES = {  # a value kind -> its JSON schema type
    "string": "string",
    "number": "integer",
    "object": "object",
    "array": "array",
    "boolean": "boolean",
}

# an assistant message -> the text its model writes for it (`ChatRenderer.turn_text`)
Render = Callable[[dict[str, Any]], str]
# (tool name, index in the turn) -> a call id in the form the template accepts
CallIds = Callable[[str, int], str]


def probe_tools() -> list[dict[str, Any]]:
    """The tools the probe calls name, typed as their arguments are (templates that write a
    parameter's type read it from here or from the value)."""

    def tool(name: str, args: dict[str, Any]) -> dict[str, Any]:
        props = {k: {"type": SCHEMA_TYPES[value_kind(v)]} for k, v in args.items()}
        return {
            "type": "function",
            "function": {
                "name": name,
                "description": "probe",
                "parameters": {"type": "object", "properties": props},
            },
        }

    return [tool(NAMES[0], TYPED), tool(NAMES[1], SECOND)]


def call_message(
    calls: list[tuple[str, str, dict[str, Any]]], content: str = "", thought: str = ""
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            for name, call_id, args in calls
        ],
    }
    if thought:
        message["reasoning_content"] = message["thinking"] = thought
    return message
