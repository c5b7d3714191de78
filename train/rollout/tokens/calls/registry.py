"""Tool calls from sampled text: one registry of parsers, one per native tool-call format.

Each parser turns the text of one assistant turn into the calls AWorld receives (`parse`) and
back (`format`: the text the model writes for those calls). The formats are in
`rollout/tokens/calls/parsers/`, one module each; `parser_names()` lists them. Besides their names,
`rollout.tool_parser` takes `auto` (the family's parser where it reads the chat template's own
calls, else the one derived from the template) and `template` (the derived one); those are
resolved per template by `rollout/tokens/calls/resolution.py`.
"""

from __future__ import annotations

from typing import Any

import aworld_train.rollout.tokens.calls.parsers  # noqa: F401  (its modules register themselves)
from aworld_train.rollout.tokens.calls.parsers.base import REGISTRY, ParsedCall, ParseResult, ToolParser

__all__ = [
    "AUTO",
    "TEMPLATE",
    "ParseResult",
    "ParsedCall",
    "ToolParser",
    "get_parser",
    "parse_tool_calls",
    "parser_names",
]

AUTO = "auto"
TEMPLATE = "template"  # the parser derived from the chat template (rollout/tokens/calls/resolution.py)


def parser_names() -> list[str]:
    return sorted(REGISTRY)


def get_parser(name: str) -> ToolParser:
    if name not in REGISTRY:
        raise ValueError(
            f"unknown tool_parser {name!r}; use {AUTO!r} (the chat template's own format), "
            f"{TEMPLATE!r} (the parser derived from the chat template) or one of "
            f"{', '.join(sorted(REGISTRY))}"
        )
    return REGISTRY[name]()


def parse_tool_calls(
    text: str, parser: str = "hermes", tools: list[dict[str, Any]] | None = None
) -> ParseResult:
    return get_parser(parser).parse(text, tools)
