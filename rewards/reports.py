"""The depot-reports reward: the exact total, and partial credit for each day whose report the agent
read and whose crates its answer names right ('day 2: 7'), so that an answer that kept more of the
counts it read (in the agent's notes, after the reports themselves left its context) scores above
one that kept fewer, and a guess without reading scores nothing."""

from __future__ import annotations

import re
from typing import Any

from aworld_train.env.reports import title
from aworld_train.rewards.calculator import exact_answer

# Below 1 (held-out accuracy counts a score of 1 only), above 0: a wrong total that names some days'
# counts right differs within a group from one that names none, which gives GRPO a signal before
# the first exact totals
PARTIAL_CREDIT = 0.5
_DAY_COUNT = re.compile(r"day\s*(\d+)\s*[:=-]?\s*(\d+)", re.IGNORECASE)


def named_counts(text: str | None) -> dict[int, int]:
    """Day -> crates, as the answer names them ('day 1: 4, day 2: 7'); the first naming of a day counts."""
    named: dict[int, int] = {}
    for day, count in _DAY_COUNT.findall(text or ""):
        named.setdefault(int(day), int(count))
    return named


def days_read(trajectory: Any, depot: str, days: int) -> set[int]:
    """Which of days 1 to `days` had their report of `depot` reach the agent as a tool result."""
    results = [call.result or "" for call in trajectory.tool_calls if not call.error]
    return {day for day in range(1, days + 1) if any(title(depot, day) in result for result in results)}


def total_or_counts(trajectory: Any, sample: dict, partial_credit: float = PARTIAL_CREDIT) -> dict:
    """`score`: 1.0 for the exact total, else partial_credit times the share of the days whose report
    the agent read and whose crates the answer names right (0 turns it off): the measured starting
    model read one report and guessed the rest, and credit for guessed days paid guessing over
    reading. `days_right` says how many days it read and named right, `days_read` how many it read."""
    result = exact_answer(
        sample.get("data_source", ""),
        trajectory.final_answer,
        sample.get("ground_truth"),
        sample.get("extra_info"),
    )
    extra = sample.get("extra_info") or {}
    crates = list(extra.get("crates", []))
    read = days_read(trajectory, str(extra.get("depot", "")).upper(), len(crates))
    named = named_counts(trajectory.final_answer)
    right = sum(day in read and named.get(day) == count for day, count in enumerate(crates, start=1))
    if result["score"] < 1.0 and crates:
        result["score"] = partial_credit * right / len(crates)
    return {**result, "days_right": right, "days_read": len(read)}
