"""`glm45`: GLM-4.5/4.6/4.7 calls, `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>`
(4.5/4.6 put newlines between the parts, 4.7 none). Values are bare text: strings as written,
other values as JSON (typed by the tool's schema)."""

from __future__ import annotations

import json
import re
from typing import Any

from aworld_train.rollout.tokens.calls.parsers.base import (
    ParsedCall,
    ParseResult,
    calls_from_blocks,
    parameter_types,
    register,
    typed_value,
)

_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_PAIR = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)(?:</arg_value>|$)", re.DOTALL)


@register("glm45")
class Glm45Parser:
    name = "glm45"

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParseResult:
        blocks = _CALL.findall(text)
        if not blocks:
            return ParseResult(content=text.strip())

        def read(raw: str) -> ParsedCall:
            name = raw.split("<arg_key>", 1)[0].strip()
            if not name or "\n" in name:
                raise ValueError("no function name in the tool call")
            types = parameter_types(tools, name)
            return ParsedCall(
                name, {k.strip(): typed_value(v, types.get(k.strip())) for k, v in _PAIR.findall(raw)}
            )

        return calls_from_blocks(text, text.index("<tool_call>"), blocks, read)

    def format(self, content: str, calls: list[ParsedCall]) -> str:
        parts = [content] if content else []
        for call in calls:
            pairs = "".join(
                f"<arg_key>{k}</arg_key><arg_value>{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}</arg_value>"
                for k, v in call.arguments.items()
            )
            parts.append(f"<tool_call>{call.name}{pairs}</tool_call>")
        return "\n".join(parts)
