"""`granite`: granite-3.x calls, `<|tool_call|>` followed by a JSON list of
`{"name": ..., "arguments": {...}}`."""

from __future__ import annotations

import json
from typing import Any

from aworld_train.rollout.tokens.calls.parsers.base import ParsedCall, ParseResult, call_from_object, register

TAG = "<|tool_call|>"


@register("granite")
class GraniteParser:
    name = "granite"

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParseResult:
        if TAG not in text:
            return ParseResult(content=text.strip())
        at = text.index(TAG)
        result = ParseResult(content=text[:at].strip())
        body = text[at + len(TAG) :].strip()
        try:
            items, _ = json.JSONDecoder().raw_decode(body)
            items = items if isinstance(items, list) else [items]
            result.calls.extend(call_from_object(item) for item in items)
        except (ValueError, json.JSONDecodeError) as exc:
            result.errors.append(f"{exc}: {body[:200]!r}")
        return result

    def format(self, content: str, calls: list[ParsedCall]) -> str:
        if not calls:
            return content
        items = [{"name": c.name, "arguments": c.arguments} for c in calls]
        return content + TAG + json.dumps(items, ensure_ascii=False)
