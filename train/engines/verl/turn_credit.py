"""Advantages per turn on verl (`algorithm.advantage: gigpo | discounted`): the rows' side and the batch's.

verl computes advantages in its trainer process, over the whole batch, from tensors that hold
one reward per row (`token_level_rewards`). A turn's reward and the state it acted on are ours:
the agent loop puts them in each output's `extra_fields` under `TURNS_FIELD` (`segment_turns`),
and verl's estimator registry calls `batch_advantages` (registered in `engines/verl/advantages.py`)
with the batch's rows. The units, groups, returns and advantages are credit.py's, the same
functions the local learner calls (`engines/local/samples.py: build_samples`), so both engines
give the same advantages for the same episodes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aworld_train.rollout.samples.codec import EpisodeSamples, agent_units
from aworld_train.rollout.samples.credit import (
    Estimator,
    Turn,
    token_turns,
    turn_advantages,
    turn_starts,
    unit_turns,
)

if TYPE_CHECKING:
    from aworld_train.inputs.config import TrainConfig

TURNS_FIELD = "aworld_turns"  # the key of a verl output's extra_fields that holds its turns
CREDIT_ENV = "AWORLD_TRAIN_VERL_CREDIT"  # JSON: {"step_weight": float, "log": path}
LOG_NAME = "turn_advantages.jsonl"  # in the run folder: each step's units and their advantages


def credit_env(cfg: TrainConfig, run_dir: Path, env: dict[str, str]) -> dict[str, str]:
    """`env` with the settings of an advantage per turn that verl's algorithm config has no key for.
    The estimators are registered in verl's trainer process by our sampler (engines/verl/episodes.py),
    which verl loads once wholly imported: a module named in VERL_USE_EXTERNAL_MODULES is imported
    inside verl's own __init__, where importing its trainer finds the CPU platform unregistered.
    Unchanged under grpo, verl's own estimator."""
    if cfg.algorithm.advantage == "grpo":
        return env
    settings = {"step_weight": cfg.algorithm.step_advantage_weight, "log": str(run_dir.resolve() / LOG_NAME)}
    return {**env, CREDIT_ENV: json.dumps(settings)}


def segment_turns(samples: EpisodeSamples, episode_id: str) -> dict[int, dict[str, Any]]:
    """Per segment (by its index in the trajectory): its unit's turns and which turn each response
    token is. A unit is one agent's turns in the episode (`codec.agent_units`); every segment of it
    carries the whole unit's rewards and anchors, and `first`: where its own turns begin in them.
    `turn_of_token` (credit's `token_turns`, counted over the unit) is -1 where the policy did not
    sample (mask 0). Segments of no unit (an agent that sampled nothing) are absent."""
    out: dict[int, dict[str, Any]] = {}
    for unit in agent_units([samples], [0]):
        turns = unit_turns(unit)
        first = 0
        for seg in unit.segments:
            out[seg.index] = {
                "unit": f"{episode_id}/{unit.agent}",
                "agent": unit.agent,
                "rewards": [t.reward for t in turns],
                "anchors": [t.anchor for t in turns],
                "first": first,
                "turn_of_token": [k + first if k >= 0 else -1 for k in token_turns(seg)],
            }
            first += len(turn_starts(seg))
    return out


def batch_advantages(
    estimator: Estimator,
    rows: Sequence[dict[str, Any] | None],
    uids: Sequence[Any],
    width: int,
    *,
    gamma: float,
    step_weight: float,
    norm_by_std: bool,
) -> tuple[list[list[float]], list[dict[str, Any]]]:
    """The advantage of every response position of a batch of `width` positions (0 where a row has
    no turns or the policy did not sample), and per unit what it was computed from (for the run's
    log). A unit's group is verl's `uid` (the prompt's samples) with the agent."""
    # each unit once (every segment of it is a row and carries the unit's turns), in the batch's order
    first: dict[str, tuple[dict[str, Any], Any]] = {}
    for row, uid in zip(rows, uids, strict=True):
        if row:
            first.setdefault(row["unit"], (row, uid))
    keys = list(first)
    units = [
        [Turn(r, a) for r, a in zip(row["rewards"], row["anchors"], strict=True)] for row, _ in first.values()
    ]
    groups = [(str(uid), row["agent"]) for row, uid in first.values()]
    per_turn = dict(
        zip(keys, turn_advantages(estimator, units, groups, gamma, step_weight, norm_by_std), strict=True)
    )
    out = []
    for row in rows:
        values = [0.0] * width
        if row:
            advantages = per_turn[row["unit"]]
            for position, turn in enumerate(row["turn_of_token"][:width]):
                if turn >= 0:
                    values[position] = advantages[turn]
        out.append(values)
    record = [
        {"unit": key, "group": list(group), "rewards": [t.reward for t in unit], "advantages": per_turn[key]}
        for key, unit, group in zip(keys, units, groups, strict=True)
    ]
    return out, record
