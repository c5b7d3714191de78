"""The tokens that end an assistant turn, read from the chat template's own renderings.

An answer turn ends with the first special token the template writes after the answer that is
not one it also writes inside turns; a call turn with the same token where the template writes
it there too, else with the last special token of what it writes after the calls (Gemma 4's
`<|tool_response>`, Solar's `<|calls|>`). Every special token the template writes inside a turn
(before its content or last argument: a channel or section tag, a think block's closer, the tag
between two calls) is never a stop id: a policy stopping there would end its turn mid-call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aworld_train.rollout.tokens.calls.literals import after_tag, common_suffix
from aworld_train.rollout.tokens.calls.probes import (
    ANSWER,
    CONTENT,
    NAMES,
    ONE,
    SECOND,
    THOUGHT,
    call_message,
    probe_tools,
)

_NEXT = "zqnext"


@dataclass(frozen=True)
class TurnEnds:
    written: tuple[str, ...]  # the tokens that end an answer turn and, where different, a call turn
    in_turn: tuple[str, ...]  # special tokens written inside a turn: never stop ids


def turn_ends(renderer) -> TurnEnds:
    """What `renderer`'s template writes to end assistant turns, and inside them."""
    special = _special_tokens(renderer.tokenizer)
    tools = probe_tools()
    history = [{"role": "user", "content": "zqhi"}]
    call_id = renderer._probe_call_id
    one = call_message([(NAMES[0], call_id(NAMES[0], 0), ONE)])
    two = call_message([(NAMES[0], call_id(NAMES[0], 0), ONE), (NAMES[1], call_id(NAMES[1], 1), SECOND)])
    inside: set[str] = set()
    probes: list[tuple[dict[str, Any], str]] = [
        ({"role": "assistant", "content": ANSWER}, ANSWER),
        ({"role": "assistant", "content": ANSWER, "reasoning_content": THOUGHT, "thinking": THOUGHT}, ANSWER),
        (one, ONE["zqks"]),
        (call_message([(NAMES[0], call_id(NAMES[0], 0), ONE)], CONTENT, THOUGHT), ONE["zqks"]),
        (two, SECOND["zqkt"]),
    ]
    for message, last in probes:
        try:
            text = renderer.turn_text(history, message, tools)
        except Exception:  # a template may refuse a probe (two calls, reasoning): it shows nothing
            continue
        if last in text:
            inside |= _specials_in(renderer.tokenizer, text[: text.rindex(last)], special)
    written = []
    tail_answer = _tail(renderer, {"role": "assistant", "content": ANSWER}, ANSWER, tools)
    answer_end = _first(renderer.tokenizer, tail_answer or "", special - inside)
    if answer_end:
        written.append(answer_end)
    tail_call = _tail(renderer, one, ONE["zqks"], tools)
    if tail_call is not None and not (answer_end and answer_end in tail_call):
        shared = len(common_suffix([tail_call, tail_answer or ""]))
        own_end = after_tag(tail_call, len(tail_call) - shared)  # never cut inside a tag
        own = _last(renderer.tokenizer, tail_call[:own_end], special - inside)
        if own and own not in written:
            written.append(own)
    return TurnEnds(tuple(written), tuple(sorted(inside)))


def _tail(renderer, message: dict[str, Any], last: str, tools: list[dict[str, Any]]) -> str | None:
    """What the template writes after `message`'s last sentinel up to the next user turn's text."""
    messages = [{"role": "user", "content": "zqhi"}, message, {"role": "user", "content": _NEXT}]
    try:
        text = renderer._apply(
            renderer._prepare(messages, tools), tools=tools if renderer.supports_tools else None
        )
    except Exception:
        return None
    end = text.rfind(_NEXT)
    start = text.rfind(last, 0, end)
    return text[start + len(last) : end] if start >= 0 and end >= 0 else None


def _special_tokens(tokenizer) -> set[str]:
    tokens = set(getattr(tokenizer, "all_special_tokens", []))
    for token in getattr(tokenizer, "added_tokens_decoder", {}).values():
        if getattr(token, "special", False):
            tokens.add(str(token))
    return tokens


def _tokens(tokenizer, text: str) -> list[str]:
    return tokenizer.convert_ids_to_tokens(tokenizer.encode(text, add_special_tokens=False))


def _specials_in(tokenizer, text: str, special: set[str]) -> set[str]:
    return {t for t in _tokens(tokenizer, text) if t in special}


def _first(tokenizer, text: str, wanted: set[str]) -> str | None:
    return next((t for t in _tokens(tokenizer, text.lstrip()) if t in wanted), None)


def _last(tokenizer, text: str, wanted: set[str]) -> str | None:
    return next((t for t in reversed(_tokens(tokenizer, text)) if t in wanted), None)
