"""The tool section we write into the system turn for chat templates that ignore `tools=`.

It lists the tools and shows how to call one: hermes tags by default, the family's own call
tokens where it has them (DeepSeek), or, where the template writes calls in a format of its own,
a call as the template writes it (the call format's `format`).
"""

from __future__ import annotations

import json
from typing import Any

from aworld_train.rollout.tokens.calls.parsers.base import ParsedCall, ToolParser
from aworld_train.rollout.tokens.calls.registry import get_parser


def tool_call_text(name: str, arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass
    return (
        "<tool_call>\n"
        + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        + "\n</tool_call>"
    )


def _example_value(schema: dict[str, Any]) -> Any:
    kind = schema.get("type")
    if kind in ("integer", "number"):
        return 1
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return {}
    return "..."


def example_call(tools: list[dict[str, Any]]) -> ParsedCall:
    """The call a tool block shows: the first tool, with a placeholder for each required argument."""
    first = tools[0].get("function", tools[0])
    params = first.get("parameters", {}) or {}
    props = params.get("properties", {}) or {}
    required = params.get("required", list(props))
    return ParsedCall(first.get("name", "tool"), {k: _example_value(props.get(k, {})) for k in required})


def example_call_text(call: ParsedCall, style: str = "hermes", writer: ToolParser | None = None) -> str:
    """`call` as a tool block of `style` (or `writer`) writes it: what the model is shown to write."""
    if writer is not None:
        return writer.format("", [call])
    if style == "deepseek":
        return get_parser("deepseek").format("", [call])
    return tool_call_text(call.name, call.arguments)


def tool_block(tools: list[dict[str, Any]], style: str = "hermes", writer: ToolParser | None = None) -> str:
    """The tool section we add to the system turn for templates that ignore `tools=`: with
    `writer`, a call written as `writer` writes it (the format the run's parser reads); else hermes
    tags, or the family's own call tokens where it has them (DeepSeek)."""
    if style == "deepseek" and writer is None:
        return deepseek_tool_block(tools)
    specs = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    example = example_call_text(example_call(tools), style, writer)
    if writer is not None:
        how = "To call one, write the call exactly in this form and nothing after it, for example:\n"
    else:
        how = "To call one, reply with a JSON object inside <tool_call></tool_call> tags and nothing after it, for example:\n"
    return (
        "\n\n# Tools\n\nYou can call these functions. Their JSON signatures:\n<tools>\n"
        f"{specs}\n</tools>\n\n"
        f"{how}{example}\n"
        "The result comes back inside <tool_response></tool_response> tags. "
        "When you know the answer, reply in plain text without a tool call."
    )


def deepseek_tool_block(tools: list[dict[str, Any]]) -> str:
    """DeepSeek-V3.1's template ignores `tools=`; its model calls tools with its own tokens."""
    from aworld_train.rollout.tokens.calls.parsers.deepseek import (
        CALL_BEGIN,
        CALL_END,
        CALLS_BEGIN,
        CALLS_END,
        SEP,
    )

    specs = []
    for tool in tools:
        fn = tool.get("function", tool)
        specs.append(
            f"### {fn.get('name')}\nDescription: {fn.get('description', '')}\n"
            f"Parameters: {json.dumps(fn.get('parameters') or {}, ensure_ascii=False)}"
        )
    return (
        "\n\n## Tools\nYou can call these tools:\n\n"
        + "\n\n".join(specs)
        + "\n\nTo call tools, reply exactly in this form, one call after another, nothing between them:\n"
        f"{CALLS_BEGIN}{CALL_BEGIN}tool_name{SEP}{{JSON arguments}}{CALL_END}{CALLS_END}\n"
        "When you know the answer, reply in plain text without a tool call."
    )
