"""A frame learned from a template, checked against every rendering it was learned from."""

from __future__ import annotations

from typing import Any

from aworld_train.rollout.tokens.calls.frame import CallFrame
from aworld_train.rollout.tokens.calls.probes import probe_tools


class NotAFrame(ValueError):
    """The template's tool calls are not a fixed frame (the message says why)."""


def check_frame(
    frame: CallFrame, probes: list[tuple[str, list[tuple[str, str, dict]], str | None]], answer: str
) -> None:
    """The frame reads back exactly each probe rendering's calls (their types too) and content, and
    an answer as no call; else NotAFrame, saying which rendering it misread."""
    tools = probe_tools()
    for text, calls, content in probes:
        result = frame.parse(text, tools)
        expected = [(name, args) for name, _, args in calls]
        got = [(c.name, c.arguments) for c in result.calls]
        if (
            result.errors
            or got != expected
            or not all(_typed_equal(a, b) for (_, a), (_, b) in zip(got, expected, strict=True))
        ):
            raise NotAFrame(
                f"the frame learned from the template does not read back its own rendering {text!r} "
                f"(read {got}, errors {result.errors})"
            )
        if content is not None and content not in result.content:
            raise NotAFrame(f"the content beside the calls is not read back from {text!r}")
        if content is not None and any(c in result.content for c in ("zqfn", "zqk")):
            raise NotAFrame(f"the calls' text is read as content in {text!r}")
    answer_read = frame.parse(answer, tools)
    if answer_read.calls or answer_read.errors:
        raise NotAFrame(f"an answer turn reads as a call: {answer!r}")


def _typed_equal(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_typed_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_typed_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b
