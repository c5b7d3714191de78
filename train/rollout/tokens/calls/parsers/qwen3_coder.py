"""`qwen3_coder`: Qwen3-Coder's and Qwen3.5's XML calls,
`<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>`.
Values are bare text: strings as written, other values as JSON (typed by the tool's schema)."""

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

_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|$)", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)(?:</parameter>|(?=<parameter=)|$)", re.DOTALL)


def _strip_one_newline(value: str) -> str:
    # the template writes "<parameter=k>\n" + value + "\n</parameter>"
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


def _value_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


@register("qwen3_coder")
class Qwen3CoderParser:
    name = "qwen3_coder"

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParseResult:
        blocks = _CALL.findall(text)
        if not blocks:
            return ParseResult(content=text.strip())

        def read(raw: str) -> ParsedCall:
            function = _FUNCTION.search(raw)
            if function is None:
                raise ValueError("no <function=...> in the tool call")
            name = function.group(1).strip()
            types = parameter_types(tools, name)
            args = {
                key.strip(): typed_value(_strip_one_newline(value), types.get(key.strip()))
                for key, value in _PARAMETER.findall(function.group(2))
            }
            return ParsedCall(name, args)

        return calls_from_blocks(text, text.index("<tool_call>"), blocks, read)

    def format(self, content: str, calls: list[ParsedCall]) -> str:
        blocks = []
        for call in calls:
            params = "".join(
                f"<parameter={k}>\n{_value_text(v)}\n</parameter>\n" for k, v in call.arguments.items()
            )
            blocks.append(f"<tool_call>\n<function={call.name}>\n{params}</function>\n</tool_call>")
        text = "\n".join(blocks)
        return content + "\n\n" + text if content and text else content or text
