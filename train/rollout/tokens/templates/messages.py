"""Chat messages as agents send them: their text, and tool results named after their calls."""

from __future__ import annotations

import json
from typing import Any

Message = dict[str, Any]


def content_text(content: Any) -> str:
    """OpenAI content (None, str, or a list of parts) as plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                parts.append(str(part.get("text", "")))
            else:
                parts.append(str(part))
        return "".join(parts)
    return str(content)


def call_names(messages: list[Message]) -> dict[str, str]:
    """The tool name of each call id in `messages` (a tool message names its tool by them)."""
    names = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            name = call.get("function", {}).get("name")
            if call.get("id") and name:
                names[call["id"]] = name
    return names


def named_results(new_messages: list[Message], history: list[Message]) -> list[Message]:
    """`new_messages` with each tool message named after its call in `history`, where it is not."""
    names = call_names(history)
    return [
        {**m, "name": names[m["tool_call_id"]]}
        if m.get("role") == "tool" and not m.get("name") and m.get("tool_call_id") in names
        else m
        for m in new_messages
    ]


def dict_arguments(args: Any) -> Any:
    if isinstance(args, str):
        try:
            return json.loads(args)
        except json.JSONDecodeError:
            return args
    return args


def with_dict_arguments(call: dict[str, Any]) -> dict[str, Any]:
    """A tool call with its arguments as a dict where they are JSON (templates index into them)."""
    fn = dict(call.get("function", {}))
    fn["arguments"] = dict_arguments(fn.get("arguments"))
    return {"type": "function", "id": call.get("id"), "function": fn}
