"""The multi-step task's reward: the exact final answer, partial credit for the chain's steps a wrong
answer reached, and a per-turn reward for each correct intermediate result, so that credit per turn
has something to place."""

from __future__ import annotations

from typing import Any

from aworld_train.rewards.calculator import exact_answer, last_number, same_number

STEP_BONUS = 0.1
# 0 by default: a penalty on refused calls taught the starting model to stop calling the tool at all
# (measured: its tool-call rate fell from 0.65 to 0.19 in 5 steps), since an answer without a call
# scores 0 and a first call that fails scores below it
ERROR_PENALTY = 0.0
# Below 1 (held-out accuracy counts a score of 1 only), above 0: the starting model answers 1 task in
# 100 exactly, so on the exact answer alone every episode of 5 GRPO steps scored 0 and no group had
# a signal to learn from; the share of the chain its calls reached differs within a group.
PARTIAL_CREDIT = 0.5


def _reaches(result: str | None, value: float) -> bool:
    """Whether a tool result is the chain's value (as the final answer is compared)."""
    got = last_number(result) if result else None
    return got is not None and same_number(got, value)


def exact_answer_and_steps(
    trajectory: Any,
    sample: dict,
    step_bonus: float = STEP_BONUS,
    error_penalty: float = ERROR_PENALTY,
    partial_credit: float = PARTIAL_CREDIT,
) -> dict:
    """`score`: 1.0 for the exact final answer, else, for an episode that answered (status ok),
    partial_credit times the share of the chain's intermediate values the calls reached (0 turns
    it off); an episode that never answered (it ran out of turns or tokens) scores 0: paid for its
    calls alone, the float32 run learned to call the tool until `max_assistant_turns` and never
    answer (no held-out answer at step 10, mean reward 0.26). `turn_rewards`, one per LLM call:
    +step_bonus on a call whose tool result is the chain's next intermediate value (the task's
    `extra_info.steps`, in order: each value earns once), -error_penalty (0 by default) on a call
    the tool refused."""
    result = exact_answer(
        sample.get("data_source", ""),
        trajectory.final_answer,
        sample.get("ground_truth"),
        sample.get("extra_info"),
    )
    steps = [float(v) for v in (sample.get("extra_info") or {}).get("steps", [])]
    turns = [0.0] * sum(len(seg.turn_starts) for seg in trajectory.segments)
    reached = 0  # the intermediate values produced so far, in order
    for call in trajectory.tool_calls:
        if call.turn >= len(turns):
            continue
        if call.error:
            turns[call.turn] -= error_penalty
        elif reached < len(steps) and _reaches(call.result, steps[reached]):
            turns[call.turn] += step_bonus
            reached += 1
    if result["score"] < 1.0 and steps:
        answered = trajectory.status == "ok"
        result["score"] = partial_credit * reached / len(steps) if answered else 0.0
    return {**result, "steps_reached": reached, "turn_rewards": turns}
