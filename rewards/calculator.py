"""Exact numeric answer, read from the final assistant message (never from tool output)."""

from __future__ import annotations

import math
import re
from typing import Any

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+")


def last_number(text: str) -> float | None:
    matches = _NUMBER.findall(text or "")
    if not matches:
        return None
    try:
        return float(matches[-1].replace(",", ""))
    except ValueError:
        return None


def same_number(a: float, b: float) -> bool:
    """Equal as answers: within a millionth of each other (printed results round), or both near 0."""
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def exact_answer(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None
) -> dict:
    """1.0 when the last number in the final answer equals the ground truth, else 0.0."""
    predicted = last_number(solution_str)
    try:
        expected = float(ground_truth)
    except (TypeError, ValueError):
        return {"score": 0.0, "parsed": predicted is not None}
    correct = predicted is not None and same_number(predicted, expected)
    return {"score": 1.0 if correct else 0.0, "parsed": predicted is not None}


def answer_and_tool_errors(trajectory: Any, sample: dict, error_penalty: float = 0.2) -> dict:
    """`exact_answer` on the final answer, and a per-turn reward: -error_penalty on each LLM call
    whose tool call failed (the calculator refused its expression), 0 on the others."""
    result = exact_answer(
        sample.get("data_source", ""),
        trajectory.final_answer,
        sample.get("ground_truth"),
        sample.get("extra_info"),
    )
    turns = [0.0] * sum(len(seg.turn_starts) for seg in trajectory.segments)
    for call in trajectory.tool_calls:
        if call.error and call.turn < len(turns):
            turns[call.turn] -= error_penalty
    return {**result, "turn_rewards": turns}
