"""`kimi_k2`: Kimi-K2's call section,
`<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}<|tool_call_end|>...<|tool_calls_section_end|>`.
The `functions.NAME:IDX` the model writes is the call's id (its tool result is headed with it)."""

from __future__ import annotations

import json
import re
from typing import Any

from aworld_train.rollout.tokens.calls.parsers.base import (
    ParsedCall,
    ParseResult,
    calls_from_blocks,
    json_arguments,
    register,
)

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARGUMENT_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
_CALL = re.compile(
    re.escape(CALL_BEGIN)
    + r"\s*(.*?)\s*"
    + re.escape(ARGUMENT_BEGIN)
    + r"(.*?)(?:"
    + re.escape(CALL_END)
    + r"|$)",
    re.DOTALL,
)


def name_of(call_id: str) -> str:
    """`functions.get_weather:0` -> `get_weather`."""
    name = call_id.rsplit(":", 1)[0] if ":" in call_id else call_id
    return name.split(".", 1)[1] if name.startswith("functions.") else name


@register("kimi_k2")
class KimiK2Parser:
    name = "kimi_k2"

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParseResult:
        start = text.find(SECTION_BEGIN)
        if start < 0:
            return ParseResult(content=text.strip())
        return calls_from_blocks(
            text,
            start,
            _CALL.findall(text[start:]),
            lambda block: ParsedCall(name_of(block[0]), json_arguments(block[1].strip()), block[0]),
            shown=lambda block: block[1],
            without_call="a call section without a call",
        )

    def format(self, content: str, calls: list[ParsedCall]) -> str:
        if not calls:
            return content
        body = "".join(
            f"{CALL_BEGIN}{c.id or f'functions.{c.name}:{i}'}{ARGUMENT_BEGIN}"
            f"{json.dumps(c.arguments, ensure_ascii=False)}{CALL_END}"
            for i, c in enumerate(calls)
        )
        return content + SECTION_BEGIN + body + SECTION_END
