"""Tool calls from sampled text.

`hermes`: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks.
`hermes_lenient`: also a bare JSON object, or one in a ```json fence, when the
text holds no tags (small models often drop them).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


@dataclass
class ParsedCall:
    name: str
    arguments: dict[str, Any]


@dataclass
class ParseResult:
    content: str
    calls: list[ParsedCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def malformed(self) -> bool:
        return bool(self.errors)


def _to_call(raw: str) -> ParsedCall:
    obj = json.loads(raw)
    if not isinstance(obj, dict):
        raise ValueError("tool call must be a JSON object")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("tool call has no 'name'")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        args = json.loads(args) if args.strip() else {}
    if not isinstance(args, dict):
        raise ValueError("tool call 'arguments' must be an object")
    return ParsedCall(name, args)


def parse_tool_calls(text: str, parser: str = "hermes") -> ParseResult:
    if parser not in ("hermes", "hermes_lenient"):
        raise ValueError(f"unknown tool_parser {parser!r}; use 'hermes' or 'hermes_lenient'")
    blocks = _TAGGED.findall(text)
    if blocks:
        result = ParseResult(content=text[: text.index("<tool_call>")].strip())
        for raw in blocks:
            try:
                result.calls.append(_to_call(raw))
            except (ValueError, json.JSONDecodeError) as exc:
                result.errors.append(f"{exc}: {raw[:200]!r}")
        return result
    if parser == "hermes_lenient":
        stripped = text.strip()
        candidates = _FENCED.findall(stripped) or ([stripped] if stripped.startswith("{") else [])
        for raw in candidates:
            try:
                call = _to_call(raw)
            except (ValueError, json.JSONDecodeError):
                continue
            return ParseResult(content="", calls=[call])
    return ParseResult(content=text.strip())
