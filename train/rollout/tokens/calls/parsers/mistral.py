"""`mistral`: `[TOOL_CALLS]` followed by a JSON list of calls (Mistral-Nemo and earlier:
`[{"name": ..., "arguments": {...}, "id": "abcDEF123"}]`) or, per call, `NAME[CALL_ID]ID[ARGS]{...}`
(Mistral-Small-3.2 and later, `[CALL_ID]` optional)."""

from __future__ import annotations

import json
from typing import Any

from aworld_train.rollout.tokens.calls.parsers.base import (
    ParsedCall,
    ParseResult,
    call_from_object,
    json_arguments,
    register,
)

_CALLS = "[TOOL_CALLS]"
_CALL_ID = "[CALL_ID]"
_ARGS = "[ARGS]"


@register("mistral")
class MistralParser:
    name = "mistral"

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParseResult:
        if _CALLS not in text:
            return ParseResult(content=text.strip())
        result = ParseResult(content=text[: text.index(_CALLS)].strip())
        decoder = json.JSONDecoder()
        for chunk in text.split(_CALLS)[1:]:
            body = chunk.strip()
            try:
                if body.startswith("["):
                    items, _ = decoder.raw_decode(body)
                    if not isinstance(items, list):
                        raise ValueError("[TOOL_CALLS] must hold a JSON list")
                    result.calls.extend(call_from_object(item) for item in items)
                    continue
                if _ARGS not in body:
                    raise ValueError("a call without [ARGS]")
                head, args = body.split(_ARGS, 1)
                name, _, call_id = head.partition(_CALL_ID)
                value, _ = decoder.raw_decode(args.strip())
                result.calls.append(ParsedCall(name.strip(), json_arguments(value), call_id.strip() or None))
            except (ValueError, json.JSONDecodeError) as exc:
                result.errors.append(f"{exc}: {body[:200]!r}")
        return result

    def format(self, content: str, calls: list[ParsedCall]) -> str:
        items = [{"name": c.name, "arguments": c.arguments} | ({"id": c.id} if c.id else {}) for c in calls]
        text = _CALLS + json.dumps(items, ensure_ascii=False) if calls else ""
        return content + text
