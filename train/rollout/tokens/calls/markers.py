"""A template's call markers: the text that opens its call block and never an answer (`<tool_call>`,
`[TOOL_CALLS]`, ...), and what a call turn writes before its first call. A turn that holds a
marker but reads as no call is a parse error, never an answer."""

from __future__ import annotations

from aworld_train.rollout.tokens.calls.frame import Piece
from aworld_train.rollout.tokens.calls.literals import (
    after_tag,
    before_tag,
    common_prefix,
    common_suffix,
    first_tag,
)
from aworld_train.rollout.tokens.calls.probes import CONTENT


def _opening(answer: str, call: str) -> int:
    """How much of a call turn's start it shares with an answer's (a think block): the calls
    begin after it. Never cut inside a tag."""
    return before_tag(call, len(common_prefix([answer, call])))


def with_call_marker(markers: tuple[str, ...], pieces: tuple[Piece, ...], answer: str) -> tuple[str, ...]:
    """The block's marker and, where a call opens with a tag of its own, that tag too."""
    opening = pieces[0] if isinstance(pieces[0], str) else ""
    tag = first_tag(opening)
    if tag and opening.lstrip().startswith(tag) and tag not in answer and tag not in markers:
        return (*markers, tag)
    return markers


def call_lead(
    answer: str, call: str, start: int, with_content: str | None, *, content_start: int | None
) -> str:
    """The text a call turn writes before its first call's first hole, less what an answer turn
    writes too (a think block) and, where a turn with content writes other text first, less that."""
    lead = call[_opening(answer, call) : start].lstrip()
    if with_content is not None and content_start is not None and CONTENT in with_content:
        at = with_content.find(CONTENT) + len(CONTENT)
        if at <= content_start:
            shared = len(common_suffix([lead, with_content[at:content_start]]))
            lead = lead[after_tag(lead, len(lead) - shared) :].lstrip()
    return lead


def call_markers(answers: list[str], lead: str) -> tuple[str, ...]:
    """The text that opens the template's call block where an answer never has it: the start of
    `lead` (what a call turn writes before the first name or id), cut after its first tag that no
    answer holds (or before its first JSON character); none where a call opens with JSON alone
    (Llama 3)."""
    json_at = min((i for i in (lead.find("{"), lead.find('"'), lead.find("'")) if i >= 0), default=len(lead))
    text = lead[:json_at].rstrip("[ \n\t")
    end = 0
    while end < len(text):
        tag = first_tag(text[end:])
        if not tag:
            end = len(text)
            break
        end = text.index(tag, end) + len(tag)
        if not any(text[:end].strip() in a for a in answers):
            break
    marker = text[:end].strip()
    if not marker or any(marker in a for a in answers):
        return ()
    return (marker,)
