"""`llama3_json`: Llama 3.1/3.2/3.3's custom-tool calls, one JSON object
`{"name": ..., "parameters": {...}}` as the whole turn, optionally after `<|python_tag|>`."""

from __future__ import annotations

import json
from typing import Any

from aworld_train.rollout.tokens.calls.parsers.base import ParsedCall, ParseResult, call_from_object, register

_PYTHON_TAG = "<|python_tag|>"


@register("llama3_json")
class Llama3JsonParser:
    name = "llama3_json"

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParseResult:
        body = text.strip()
        if body.startswith(_PYTHON_TAG):
            body = body[len(_PYTHON_TAG) :].lstrip()
        if not (body.startswith("{") and '"name"' in body):
            return ParseResult(content=text.strip())
        result = ParseResult(content="")
        # several calls may be separated by ';' (the model card's parallel form)
        decoder, at = json.JSONDecoder(), 0
        while at < len(body):
            try:
                obj, end = decoder.raw_decode(body, at)
                result.calls.append(call_from_object(obj, ("parameters", "arguments")))
            except (ValueError, json.JSONDecodeError) as exc:
                result.errors.append(f"{exc}: {body[at : at + 200]!r}")
                break
            at = end
            while at < len(body) and body[at] in " \t\r\n;":
                at += 1
        return result

    def format(self, content: str, calls: list[ParsedCall]) -> str:
        text = "; ".join(
            json.dumps({"name": c.name, "parameters": c.arguments}, ensure_ascii=False) for c in calls
        )
        return text or content
