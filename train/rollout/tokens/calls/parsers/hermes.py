"""`hermes`: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks (Hermes 2 Pro/3,
Qwen2.5, Qwen3, QwQ, granite-4.0, SmolLM3, and our tool block for templates that ignore tools).
`hermes_lenient`: also a bare JSON object, or one in a ```json fence, when the text holds no
tags (small models often drop them)."""

from __future__ import annotations

import json
import re
from typing import Any

from aworld_train.rollout.tokens.calls.parsers.base import (
    ParsedCall,
    ParseResult,
    call_from_object,
    calls_from_blocks,
    register,
)

_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


def call_block(name: str, arguments: Any) -> str:
    return (
        "<tool_call>\n"
        + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        + "\n</tool_call>"
    )


@register("hermes")
class HermesParser:
    name = "hermes"

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParseResult:
        blocks = _TAGGED.findall(text)
        if not blocks:
            return self._untagged(text)
        return calls_from_blocks(
            text, text.index("<tool_call>"), blocks, lambda raw: call_from_object(json.loads(raw))
        )

    def _untagged(self, text: str) -> ParseResult:
        return ParseResult(content=text.strip())

    def format(self, content: str, calls: list[ParsedCall]) -> str:
        blocks = "\n".join(call_block(c.name, c.arguments) for c in calls)
        return content + "\n" + blocks if content and blocks else content or blocks


@register("hermes_lenient")
class LenientHermesParser(HermesParser):
    name = "hermes_lenient"

    def _untagged(self, text: str) -> ParseResult:
        stripped = text.strip()
        candidates = _FENCED.findall(stripped) or ([stripped] if stripped.startswith("{") else [])
        for raw in candidates:
            try:
                call = call_from_object(json.loads(raw))
            except (ValueError, json.JSONDecodeError):
                continue
            return ParseResult(content="", calls=[call])
        return ParseResult(content=stripped)
