"""Credit per turn: the advantage estimators (`algorithm.advantage`), pure functions over turns.

A *unit* is one agent's turns in one episode (its LLM calls, in order); each turn has its own
reward r_t (the reward function's `turn_rewards`, plus the episode's reward on the last turn) and
an anchor: the normalised observation it acted on (`anchor_text`). Units share a group when they
are the same agent in samples of the same task. Every estimator returns one advantage per turn;
the engines put a turn's advantage on its sampled tokens.

- `grpo`: the return R = sum of r_t against its group's mean (over its std); every turn gets it.
  Without turn rewards this is the episode reward's GRPO advantage, as before.
- `discounted`: the return-to-go G_t = sum_k gamma^(k-t) r_k, against the group's mean of the
  whole returns G_0 (reward-to-go with a group baseline). With gamma 1 and no turn rewards every
  G_t is R: `grpo` again.
- `gigpo` (arXiv 2505.10978): the episode-level advantage of `grpo` plus `step_weight` times a
  step-level one: turns of the group that acted on the same anchor state form a step group, and
  a turn's G_t is compared with the step group's mean. A state seen once (a step group of one)
  adds 0: that turn keeps the episode-level advantage, the paper's fallback.

Both scale discounted returns by the std of the same returns undiscounted (gamma 1), and leave a
group unscaled where those tie. Scaled by their own std, four episodes of equal reward 0.25, three
of 2 turns and one of 3, got +0.5 and -1.5 at their first turn (gigpo) and +2.6 at every last turn
(`discounted`) at gamma 0.95: the discount alone, blown up to the size of a reward difference. On
the multi-step task that drove gigpo within 8 steps to one call and an answer in every episode,
after which its groups tied and it trained nothing (docs/BENCHMARKS.md, the `credit` comparison).
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from aworld_train.rollout.samples.codec import AgentUnit, SegmentSample, group_advantages, group_scale

Estimator = Literal["grpo", "gigpo", "discounted"]
ESTIMATORS: tuple[str, ...] = ("grpo", "gigpo", "discounted")

# A call id inside an observation ("call_3f9a2c", "toolu_01..."): unique per sample, so it would
# keep the same state from recurring across a group's trajectories.
_CALL_ID = re.compile(r"\b(?:call|toolu|chatcmpl|fc)[_-][A-Za-z0-9_-]{4,}\b")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Credit:
    """How the step's advantages are estimated (`algorithm.advantage`, `gamma`, `step_advantage_weight`)."""

    estimator: Estimator = "grpo"
    gamma: float = 1.0
    step_weight: float = 1.0
    norm_by_std: bool = True


def credit_of(algorithm: Any) -> Credit:
    """The run's `algorithm` section's advantage settings."""
    return Credit(
        algorithm.advantage, algorithm.gamma, algorithm.step_advantage_weight, algorithm.norm_adv_by_std
    )


def anchor_text(observation: str) -> str:
    """An observation as a state key: call ids removed, whitespace collapsed, trimmed."""
    return _SPACE.sub(" ", _CALL_ID.sub("<id>", observation)).strip()


@dataclass(frozen=True)
class Turn:
    reward: float  # r_t: the turn's own reward, plus the episode's on the unit's last turn
    anchor: str = ""  # the normalised observation the turn acted on


def turn_rewards(episode_reward: float, own: Sequence[float], turns: int) -> list[float]:
    """r_t of a unit's `turns` turns: its own per-turn rewards (missing ones 0) and the episode's
    reward on the last turn."""
    if len(own) > turns:
        raise ValueError(
            f"{len(own)} turn rewards for {turns} turns: give at most one per LLM call of the agent"
        )
    rewards = [float(r) for r in own] + [0.0] * (turns - len(own))
    if rewards:
        rewards[-1] += episode_reward
    return rewards


def turn_starts(segment: SegmentSample) -> list[int]:
    """Where each LLM call of the segment began (one at the prompt's end where none is recorded)."""
    return segment.turn_starts or [len(segment.prompt_ids)]


def unit_turns(unit: AgentUnit) -> list[Turn]:
    """A unit's turns over its segments, in order: their rewards and anchors."""
    anchors = [
        anchor_text(seg.turn_observations[k]) if k < len(seg.turn_observations) else ""
        for seg in unit.segments
        for k in range(len(turn_starts(seg)))
    ]
    rewards = turn_rewards(unit.reward, unit.turn_rewards, len(anchors))
    return [Turn(r, a) for r, a in zip(rewards, anchors, strict=True)]


def token_turns(segment: SegmentSample) -> list[int]:
    """Per response position of a segment: the index of the turn that sampled it (loss mask 1),
    -1 where the policy did not sample."""
    prompt = len(segment.prompt_ids)
    out = [-1] * len(segment.response_ids)
    bounds = [start - prompt for start in turn_starts(segment)] + [len(out)]
    for k in range(len(bounds) - 1):
        for position in range(max(bounds[k], 0), bounds[k + 1]):
            if segment.response_mask[position]:
                out[position] = k
    return out


def token_advantages(segment: SegmentSample, advantages: Sequence[float]) -> list[float]:
    """Per response position of a segment: its turn's advantage where the policy sampled, 0
    elsewhere; `advantages` has one per turn of the segment."""
    return [advantages[k] if k >= 0 else 0.0 for k in token_turns(segment)]


def returns_to_go(rewards: Sequence[float], gamma: float) -> list[float]:
    """G_t = r_t + gamma * G_(t+1), from the last turn back."""
    out, running = [0.0] * len(rewards), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def turn_advantages(
    estimator: Estimator,
    units: Sequence[Sequence[Turn]],
    groups: Sequence[Hashable],
    gamma: float = 1.0,
    step_weight: float = 1.0,
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> list[list[float]]:
    """One advantage per turn of every unit (units of a group compare with each other)."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {estimator!r}; use one of {', '.join(ESTIMATORS)}")
    totals = [sum(t.reward for t in unit) for unit in units]
    episode_level = group_advantages(totals, groups, norm_by_std, eps)
    if estimator == "grpo":
        return [[a] * len(unit) for a, unit in zip(episode_level, units, strict=True)]
    togo = [returns_to_go([t.reward for t in unit], gamma) for unit in units]
    if estimator == "discounted":
        return _against_first_returns(togo, totals, groups, norm_by_std, eps)
    undiscounted = [returns_to_go([t.reward for t in unit], 1.0) for unit in units]
    step_level = _step_advantages(units, togo, undiscounted, groups, norm_by_std, eps)
    return [[a + step_weight * s for s in steps] for a, steps in zip(episode_level, step_level, strict=True)]


def _against_first_returns(
    togo: list[list[float]],
    totals: Sequence[float],
    groups: Sequence[Hashable],
    norm_by_std: bool,
    eps: float,
) -> list[list[float]]:
    """(G_t - mean of the group's G_0) / (std of the group's returns R + eps), unscaled where the
    returns R tie; a group of one gets 0."""
    members: dict[Hashable, list[int]] = defaultdict(list)
    for index, group in enumerate(groups):
        members[group].append(index)
    out = [[0.0] * len(g) for g in togo]
    for indices in members.values():
        acted = [i for i in indices if togo[i]]  # units with a turn
        if len(acted) < 2:
            continue
        mean = statistics.fmean(togo[i][0] for i in acted)
        scale = group_scale([totals[i] for i in acted], norm_by_std, eps)
        for i in acted:
            out[i] = [(g - mean) / scale for g in togo[i]]
    return out


def _step_advantages(
    units: Sequence[Sequence[Turn]],
    togo: list[list[float]],
    undiscounted: list[list[float]],
    groups: Sequence[Hashable],
    norm_by_std: bool,
    eps: float,
) -> list[list[float]]:
    """Each turn's G_t against the turns of its group that acted on the same anchor state: GRPO's
    normalisation with (group, anchor) as the group, scaled by their undiscounted returns-to-go."""
    places = [(i, t) for i, unit in enumerate(units) for t in range(len(unit))]
    values = [togo[i][t] for i, t in places]
    spread = [undiscounted[i][t] for i, t in places]
    keys = [(groups[i], units[i][t].anchor) for i, t in places]
    out = [[0.0] * len(unit) for unit in units]
    advantages = group_advantages(values, keys, norm_by_std, eps, spread)
    for (i, t), advantage in zip(places, advantages, strict=True):
        out[i][t] = advantage
    return out
