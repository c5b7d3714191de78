"""The AgentGym environment's own reward as the episode's reward.

The bridge (`aworld_train.env.agentgym.bridge`) ends an `act` result with
`[environment] reward=R done=true|false` once the environment gives a reward or ends the
task; the last such line among the episode's tool results is the episode's reward. An
episode that never got one scores 0. Extras: `done` (the environment ended the task),
`steps` (act calls answered) and `success` (done with reward 1 or more).
"""

from __future__ import annotations

from typing import Any

from aworld_train.env.agentgym.status import read_status


def env_reward(trajectory: Any, sample: dict[str, Any]) -> dict[str, Any]:
    reward, done, steps = 0.0, False, 0
    for call in getattr(trajectory, "tool_calls", []) or []:
        if call.name != "act" or call.result is None:
            continue
        steps += 1
        status = read_status(call.result)
        if status is not None:
            reward, done = status
    return {
        "score": reward,
        "done": float(done),
        "steps": float(steps),
        "success": float(done and reward >= 1.0),
    }
