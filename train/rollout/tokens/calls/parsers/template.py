"""`template`: the call format learned from the model's own chat template (`rollout/tokens/calls/frame.py`,
`rollout/tokens/calls/derivation.py`). It exists per template, so it is made by `rollout/tokens/calls/resolution.py`
from a renderer rather than by name from the registry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aworld_train.rollout.tokens.calls.frame import CallFrame
from aworld_train.rollout.tokens.calls.parsers.base import ParsedCall, ParseResult

NAME = "template"


@dataclass(frozen=True)
class TemplateParser:
    frame: CallFrame
    name: str = NAME

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParseResult:
        return self.frame.parse(text, tools)

    def format(self, content: str, calls: list[ParsedCall]) -> str:
        return self.frame.format(content, calls)
