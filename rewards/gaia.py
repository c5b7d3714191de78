"""GAIA's scoring rules, applied to the final answer of the last assistant message.

- A ground truth that is a number matches an answer that is the same number once
  `$`, `%` and `,` are stripped ("$1,250.0" matches "1250").
- A ground truth with commas or semicolons is a list: same length, compared element by
  element (numbers as numbers, strings without whitespace, case-insensitive).
- Any other ground truth is a string: compared without whitespace and punctuation,
  case-insensitive.

The answer is what the agent marked last: the last `<answer></answer>` block or what
follows the last "FINAL ANSWER:", whichever comes later; else the whole message. A "FINAL ANSWER:" inside the block is
read the same way, and markdown emphasis around the marker or the answer (`**FINAL
ANSWER:** 42`, `*42*`) is dropped. Tool output is never scored: verl passes the final
assistant message as `solution_str`.
"""

from __future__ import annotations

import re
import string
from typing import Any

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
# The marker, with markdown emphasis around it or its colon: "**FINAL ANSWER:**", "__FINAL ANSWER__:".
_FINAL_ANSWER = re.compile(r"[*_]*FINAL ANSWER[*_]*\s*:[*_]*", re.IGNORECASE)
_EMPHASIS = re.compile(r"^([*_`]{1,3})(.+?)\1$", re.DOTALL)
_LIST_SEPARATORS = re.compile(r"[,;]")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def _after_last_marker(text: str) -> str | None:
    """What follows the last "FINAL ANSWER:" in `text`, without emphasis; None without a marker."""
    markers = list(_FINAL_ANSWER.finditer(text))
    if not markers:
        return None
    return _unemphasize(text[markers[-1].end() :])


def _unemphasize(text: str) -> str:
    text = text.strip()
    while match := _EMPHASIS.match(text):
        text = match.group(2).strip()
    return text


def extract_answer(message: str) -> tuple[str, bool]:
    """(the answer in `message`, whether it was marked as the answer).

    Whichever comes last wins: the last `<answer>` block or the last "FINAL ANSWER:"
    outside the blocks, since a model that corrects itself writes its final word last.
    """
    message = message or ""
    blocks = list(_ANSWER_TAG.finditer(message))
    outside = _ANSWER_TAG.sub(lambda m: " " * len(m.group(0)), message)  # keeps positions
    markers = list(_FINAL_ANSWER.finditer(outside))
    if blocks and (not markers or blocks[-1].start() > markers[-1].start()):
        inner = blocks[-1].group(1)
        final = _after_last_marker(inner)
        return (final if final is not None else _unemphasize(inner)), True
    if markers:
        return _unemphasize(outside[markers[-1].end() :]), True
    return message.strip(), False


def as_number(text: str) -> float | None:
    try:
        return float(text.strip().replace("$", "").replace("%", "").replace(",", ""))
    except ValueError:
        return None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _squash(text: str, drop_punctuation: bool) -> str:
    text = re.sub(r"\s+", "", text).lower()
    return text.translate(_PUNCTUATION) if drop_punctuation else text


def _same_number(answer: str, truth: str) -> bool:
    number = as_number(answer)
    return number is not None and number == float(truth)


def answers_match(answer: str, truth: str) -> bool:
    """GAIA's verdict for one answer against one ground truth."""
    answer, truth = str(answer), str(truth).strip()
    if _is_number(truth):
        return _same_number(answer, truth)
    if _LIST_SEPARATORS.search(truth):
        truths = [t.strip() for t in _LIST_SEPARATORS.split(truth)]
        answers = [a.strip() for a in _LIST_SEPARATORS.split(answer)]
        if len(truths) != len(answers):
            return False
        return all(
            _same_number(a, t) if _is_number(t) else _squash(a, False) == _squash(t, False)
            for a, t in zip(answers, truths, strict=True)
        )
    return _squash(answer, True) == _squash(truth, True)


def gaia_reward(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None
) -> dict:
    """1.0 when the final answer matches the ground truth by GAIA's rules, else 0.0."""
    answer, marked = extract_answer(solution_str)
    correct = ground_truth is not None and answers_match(answer, str(ground_truth))
    return {"score": 1.0 if correct else 0.0, "answer_marked": marked}
