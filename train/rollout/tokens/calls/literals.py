"""Literal text in a model's turn, whitespace between its parts not binding: where it is, what lies
before it, what texts share, and a template's tags."""

from __future__ import annotations

import re
from typing import Literal

TAGS = re.compile(r"<[^<>]*>|\[[A-Z_/]+\]")  # a template's tags: <tool_call>, <|im_end|>, [TOOL_CALLS]


def literal_chunks(literal: str) -> list[str]:
    return literal.split()


def match_literal(text: str, pos: int, literal: str, tail: Literal["any", "none"] = "any") -> int | None:
    """Where `literal` ends if it is at `pos` (whitespace between its parts not binding), None if
    it is not there. Whitespace after it is taken too, unless `tail` is "none" (a bare value
    follows, whose edges `trim` cuts exactly)."""
    for chunk in literal_chunks(literal):
        pos = skip_space(text, pos)
        if not text.startswith(chunk, pos):
            return None
        pos += len(chunk)
    if tail == "any" and trailing_space(literal):
        pos = skip_space(text, pos)
    return pos


def find_literal(text: str, literal: str, start: int = 0) -> tuple[int, int] | None:
    """The first place from `start` where `literal` is: (where it begins, where it ends)."""
    chunks = literal_chunks(literal)
    if not chunks:
        return None
    at = text.find(chunks[0], start)
    while at >= 0:
        end = match_literal(text, at, literal.lstrip())
        if end is not None:
            return at, end
        at = text.find(chunks[0], at + 1)
    return None


def read_until(text: str, pos: int, stop: str) -> tuple[str, int]:
    """The text from `pos` to where `stop` begins (to the end where it does not occur)."""
    found = find_literal(text, stop, pos) if stop.strip() else None
    end = found[0] if found else len(text)
    return text[pos:end], end


def skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def leading_space(text: str) -> str:
    return text[: len(text) - len(text.lstrip())]


def trailing_space(text: str) -> str:
    return text[len(text.rstrip()) :]


def trim(raw: str, head: str, tail: str) -> str:
    if head and raw.startswith(head):
        raw = raw[len(head) :]
    if tail and raw.endswith(tail):
        raw = raw[: len(raw) - len(tail)]
    return raw


def common_prefix(texts: list[str]) -> str:
    first = texts[0] if texts else ""
    n = 0
    while n < len(first) and all(len(t) > n and t[n] == first[n] for t in texts):
        n += 1
    return first[:n]


def common_suffix(texts: list[str]) -> str:
    return common_prefix([t[::-1] for t in texts])[::-1]


def cut_short(text: str, pos: int, literal: str) -> bool:
    """Does the text end at `pos` or partway into `literal` (the stop token cut the closing text)?"""
    rest = "".join(text[pos:].split())
    return "".join(literal.split()).startswith(rest)


def first_tag(text: str) -> str:
    match = TAGS.search(text)
    return match.group() if match else ""


def inside_tag(text: str, cut: int) -> int:
    """Where the tag that `cut` falls inside begins (-1: it falls between tags)."""
    for match in TAGS.finditer(text):
        if match.start() < cut < match.end():
            return match.start()
    return -1


def after_tag(text: str, cut: int) -> int:
    """`cut`, moved forward past the tag it falls inside, if any."""
    start = inside_tag(text, cut)
    return cut if start < 0 else TAGS.match(text, start).end()


def before_tag(text: str, cut: int) -> int:
    """`cut`, moved back to the start of the tag it falls inside, if any."""
    start = inside_tag(text, cut)
    return cut if start < 0 else start
