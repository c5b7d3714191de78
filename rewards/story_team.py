"""The story team's reward: the exact final answer, and partial credit where the reader handed the
calculator agent an expression whose value is the answer, so that the reader's skill shows in the
score before the team's first exact answers (the calculator agent's share is the rest of the point)."""

from __future__ import annotations

from typing import Any

from aworld_train.env.calculator import CalculatorError, evaluate
from aworld_train.rewards.calculator import exact_answer, last_number, same_number

# Below 1 (held-out accuracy counts a score of 1 only): the starting team answers 2 tasks in 100
# exactly, so on the exact answer alone 92% of groups of 4 score 0 and teach nothing; its reader
# hands over the right expression in 7 of 100 (the test tasks, seed 0), which adds a signal.
READER_CREDIT = 0.5
SOLVER = "calculator_agent"  # the team's second agent (agents/story_team.py), the reader's reader


def handed_text(trajectory: Any, solver: str = SOLVER) -> str | None:
    """What the reader handed the calculator agent: the user message of its last prompt."""
    messages = (trajectory.prompt_inputs.get(solver) or {}).get("messages") or []
    texts = [m.get("content") for m in messages if m.get("role") == "user"]
    return texts[-1] if texts and isinstance(texts[-1], str) else None


def expression_values(text: str | None) -> list[float]:
    """The values of what the reader wrote, read as an expression: the whole text, its first line,
    and that line up to its first `=` (the starting reader writes `(56 - 9) * 4 = 188` and goes on:
    the expression is its part; working the value out is the calculator agent's)."""
    text = (text or "").strip()
    first = text.splitlines()[0] if text else ""
    values = []
    for candidate in dict.fromkeys((text, first, first.split("=")[0])):
        try:
            values.append(float(evaluate(candidate)))
        except (CalculatorError, ValueError):
            continue
    return values


def answer_or_expression(trajectory: Any, sample: dict, reader_credit: float = READER_CREDIT) -> dict:
    """`score`: 1.0 for the exact final answer, else reader_credit where the reader's expression
    has the answer's value (0 turns it off), else 0.0. `reader_right` says whether it had."""
    result = exact_answer(
        sample.get("data_source", ""),
        trajectory.final_answer,
        sample.get("ground_truth"),
        sample.get("extra_info"),
    )
    try:
        expected = float(sample.get("ground_truth"))
    except (TypeError, ValueError):
        expected = None
    values = expression_values(handed_text(trajectory))
    right = expected is not None and any(same_number(v, expected) for v in values)
    if result["score"] < 1.0 and right:
        result["score"] = reader_credit
    return {**result, "reader_right": right}


def each_agents_part(trajectory: Any, sample: dict, reader_credit: float = READER_CREDIT) -> dict:
    """`answer_or_expression`'s score for the team (held-out accuracy still counts exact answers),
    and each agent rewarded for its own part (`agent_rewards`): the reader 1 where its expression has
    the answer's value, the calculator agent 1 where its answer is the value of what it was handed
    (right or wrong), else 0. On the team's reward alone, the calculator agent's tokens share the
    credit for the reader's expression whatever they did (docs/BENCHMARKS.md, `team-credit`)."""
    result = answer_or_expression(trajectory, sample, reader_credit)
    answer = last_number(trajectory.final_answer or "")
    handed = expression_values(handed_text(trajectory))
    solved = answer is not None and any(same_number(answer, value) for value in handed)
    agents = {"reader": float(result["reader_right"]), SOLVER: float(solved)}
    return {**result, "solver_right": solved, "agent_rewards": agents}
