"""The reward an agent reported for its episode: for agents that score themselves (an environment
that knows whether the task succeeded), sent to the gateway session's `POST <base_url>/reward`
(`{"reward": 1.0, "extras": {...}}`). Set `reward.fn: aworld_train.rewards.reported:reported_reward`."""

from __future__ import annotations

from typing import Any

from aworld_train.core.errors import RewardError


def reported_reward(trajectory, sample: dict[str, Any]) -> dict[str, Any]:
    if trajectory.reported_reward is None:
        raise RewardError(
            'the agent reported no reward for this episode: POST {"reward": <number>} to its session\'s '
            "<base_url>/reward before it answers the turn, or set reward.fn to a function that scores "
            "the trajectory"
        )
    return {"score": trajectory.reported_reward, **trajectory.reported_extras}
