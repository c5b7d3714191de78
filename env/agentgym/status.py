"""The line an `act` result ends with once the environment gives a reward or ends the task.

The bridge writes it and `aworld_train.rewards.agentgym` reads it back from the
trajectory's tool results, so the episode's reward is the environment's own."""

from __future__ import annotations

import re

_LINE = re.compile(r"\[environment\] reward=(-?[0-9.eE+-]+) done=(true|false)")


def status_line(reward: float, done: bool) -> str:
    return f"[environment] reward={reward:g} done={'true' if done else 'false'}"


def read_status(text: str) -> tuple[float, bool] | None:
    """The last status line in `text`: (reward, done), or None."""
    found = _LINE.findall(text or "")
    if not found:
        return None
    reward, done = found[-1]
    return float(reward), done == "true"
