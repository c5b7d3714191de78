"""`deepseek`: DeepSeek's tool-call tokens. V3.1:
`<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>`;
V3 and R1 write `function<｜tool▁sep｜>NAME` and the arguments in a ```json fence."""

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

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
_CALL = re.compile(re.escape(CALL_BEGIN) + r"(.*?)(?:" + re.escape(CALL_END) + r"|$)", re.DOTALL)
_FENCE = re.compile(r"^([^\n]+)\n```(?:json)?\s*(.*?)\s*(?:```|$)", re.DOTALL)


@register("deepseek")
class DeepSeekParser:
    name = "deepseek"

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParseResult:
        start = text.find(CALLS_BEGIN)
        if start < 0:
            start = text.find(CALL_BEGIN)
        if start < 0:
            return ParseResult(content=text.strip())

        def read(raw: str) -> ParsedCall:
            if SEP not in raw:
                raise ValueError("a call without <｜tool▁sep｜>")
            left, right = raw.split(SEP, 1)
            fenced = _FENCE.match(right) if left.strip() == "function" else None
            if fenced:  # V3 / R1: function<｜tool▁sep｜>NAME\n```json\n{...}\n```
                return ParsedCall(fenced.group(1).strip(), json_arguments(fenced.group(2)))
            return ParsedCall(left.strip(), json_arguments(right.strip()))

        return calls_from_blocks(
            text, start, _CALL.findall(text[start:]), read, without_call="tool-call tokens without a call"
        )

    def format(self, content: str, calls: list[ParsedCall]) -> str:
        if not calls:
            return content
        body = "".join(
            f"{CALL_BEGIN}{c.name}{SEP}{json.dumps(c.arguments, ensure_ascii=False)}{CALL_END}" for c in calls
        )
        return content + CALLS_BEGIN + body + CALLS_END
