"""A rendered turn's delta: the template's text after a sampled assistant turn, found by rendering a
stand-in of the conversation and cutting after its last assistant turn (ChatRenderer.delta_text)."""

from __future__ import annotations

import json

from aworld_train.rollout.tokens.templates.messages import Message, content_text

_MARK = "ASSISTANT_STAND_IN"
_STAND_IN = {
    "system": "SYSTEM_STAND_IN",
    "user": "USER_STAND_IN",
    "assistant": "EARLIER_REPLY",
    "tool": "RESULT_STAND_IN",
}
_STAND_IN_TEXT = tuple(_STAND_IN.values())


def cut_after_turn(
    text: str, new_messages: list[Message], stop_text: str, with_calls: bool, closers: tuple[str, ...]
) -> tuple[str | None, str | None]:
    """The delta in `text` (a stand-in conversation's rendering with the new messages): (tail, None),
    or (None, why this rendering gives none)."""
    marks = text.count(_MARK)
    earlier = max((text.rfind(w) + len(w) for w in _STAND_IN_TEXT if w in text), default=0)
    first_new = _first_shown(text, new_messages, earlier)
    if with_calls and first_new >= 0 and (marks == 0 or first_new < text.find(_MARK)):
        # the template writes a call turn's content after its tool results (Gemma 4) or
        # not at all (Solar): the calls end at the stop token before the first result,
        # and the content, which the model has not written, is left out
        at = text.rfind(stop_text, 0, first_new)
        if at < 0 or marks > 1:
            return None, f"the template does not end the calls with {stop_text!r}"
        tail = text[at + len(stop_text) :].replace(_MARK, "")
    elif marks != 1:
        return None, "the stand-in assistant content is not rendered exactly once"
    elif with_calls:
        tail = text[text.index(_MARK) + len(_MARK) :]
        at = tail.find(stop_text)
        if at < 0:
            return None, f"the template does not end the turn with {stop_text!r}"
        tail = tail[at + len(stop_text) :]
    else:
        tail = text[text.index(_MARK) + len(_MARK) :]
    if stop_text:
        # the sampled stop token closed the turn (<|im_end|>, <|eot_id|>, </s>), opened
        # the next one (GLM's <|observation|>) or stands for the template's closer
        # (gpt-oss's <|return|> for <|end|>): no turn end is written after it again,
        # whitespace before it or not (Apriel writes "\n<|end|>\n" and its eos)
        tail = _after_closers(tail, closers)
    if any(word in tail for word in _STAND_IN_TEXT):
        return None, "the template repeats earlier turns after the assistant turn"
    return tail, None


def stand_in_history(history: list[Message], keep_system: bool, with_calls: bool) -> list[Message]:
    """`history` with stand-in text; the last (assistant) turn's content is the cut mark."""
    out: list[Message] = []
    for i, message in enumerate(history):
        role = message.get("role")
        last = i == len(history) - 1
        if role == "system" and not keep_system:
            continue
        item: Message = {"role": role, "content": _MARK if last else _STAND_IN.get(role, "STAND_IN")}
        if message.get("tool_calls") and (with_calls or not last):
            item["tool_calls"] = message["tool_calls"]
        for key in ("tool_call_id", "name"):
            if message.get(key):
                item[key] = message[key]
        out.append(item)
    return out


def _after_closers(tail: str, closers: tuple[str, ...]) -> str:
    """`tail` without the turn ends it opens with (and the whitespace before each)."""
    closers = tuple(c for c in closers if c)
    while True:
        stripped = tail.lstrip()
        closer = next((c for c in closers if stripped.startswith(c)), None)
        if closer is None:
            return tail
        tail = stripped[len(closer) :]


def _first_shown(text: str, messages: list[Message], start: int) -> int:
    """Where the first of `messages` with content shows in `text` from `start` (-1: none does)."""
    for message in messages:
        content = content_text(message.get("content")).strip()
        if content:
            return text.find(content, start)
    return -1


def shows(text: str, content: str) -> bool:
    """Does the rendered text hold a tool result (as written, or JSON-escaped by the template)?"""
    content = content.strip()
    return not content or content in text or json.dumps(content, ensure_ascii=False)[1:-1] in text
