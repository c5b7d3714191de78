"""An episode as AReaL's trainer reads it: the rows of its trained agents, and under an advantage
per turn (`algorithm.advantage` gigpo or discounted) a row per turn.

AReaL gives every token of a row the row's reward (its actor's discount 1, no critic), so an
advantage of its own per turn needs a row of its own: turn k's row is the ledger up to the end of
turn k, its loss on turn k's sampled tokens only, its reward turn k's advantage. The prefix is the
same ids the turn was sampled after, so AReaL recomputes the same logprobs.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

import torch

from aworld_train.rollout.episodes.trajectory import Trajectory
from aworld_train.rollout.samples.codec import SegmentSample, agent_units, episode_samples
from aworld_train.rollout.samples.credit import Turn, turn_starts, unit_turns
from aworld_train.rollout.tokens.ledger import NO_VERSION

# AReaL marks tokens the policy did not sample with version -1, as our ledger does.
NOT_SAMPLED = NO_VERSION


def token_versions(sample: SegmentSample) -> list[int]:
    """The weight version of every token of the sample, as AReaL's own workflows lay them out
    (areal/workflow/multi_turn.py): -1 for the prompt and every token the policy did not sample,
    AReaL's version for each sampled one (kept by the ledger). A sampled token without a version
    did not come from AReaL's engine: a bug."""
    versions = [NOT_SAMPLED] * len(sample.prompt_ids) + list(sample.response_versions)
    offset = len(sample.prompt_ids)
    if any(versions[offset + i] == NOT_SAMPLED for i, sampled in enumerate(sample.sampled_mask) if sampled):
        raise RuntimeError("a sampled token of the ledger carries no version from AReaL's engine")
    return versions


@dataclass(frozen=True)
class AgentRow:
    """One row of AReaL's batch: an agent's first segment of an episode (or, for an episode that
    trains nothing, a row without loss), with the reward it is trained for."""

    agent: str
    reward: float
    tensors: dict[str, torch.Tensor]
    dropped: int  # the agent's later segments, which AReaL's one row per agent leaves out
    segment: int = -1  # the segment it holds, by index in the trajectory's segments
    turns: tuple[Turn, ...] = ()  # the segment's turns: their rewards and the states they acted on
    turn_bounds: tuple[int, ...] = ()  # where each turn begins in input_ids


def areal_rows(
    traj: Trajectory,
    prompt_fallback: list[int],
    pad_id: int,
    train_on_malformed: bool = False,
    *,
    frozen_agents: Collection[str] = (),
) -> list[AgentRow]:
    """A trajectory as AReaL's trainer reads it: one row per trained agent (tensors of shape [1, L]
    plus rewards [1]); an episode that trains nothing gives one row without loss."""
    samples = episode_samples(traj, train_on_malformed, frozen_agents)
    units = agent_units([samples], [0])
    if not units:
        ids = (traj.segments[0].prompt_ids if traj.segments else list(prompt_fallback)) + [pad_id]
        empty = [0] * len(ids)
        return [
            AgentRow(
                "",
                samples.reward,
                _tensors(ids, empty, [0.0] * len(ids), [NOT_SAMPLED] * len(ids), reward=samples.reward),
                0,
            )
        ]
    rows = []
    for unit in units:
        sample = unit.segments[0]
        ids = sample.prompt_ids + sample.response_ids
        loss_mask = [0] * len(sample.prompt_ids) + sample.response_mask
        logprobs = [0.0] * len(sample.prompt_ids) + sample.response_logprobs
        tensors = _tensors(ids, loss_mask, logprobs, token_versions(sample), reward=unit.reward)
        # the turns of the segment AReaL trains: the reward function's turn rewards as far as it goes
        starts = turn_starts(sample)
        first = replace(unit, segments=[sample], turn_rewards=unit.turn_rewards[: len(starts)])
        turns = tuple(unit_turns(first))
        rows.append(
            AgentRow(
                unit.agent, unit.reward, tensors, len(unit.segments) - 1, sample.index, turns, tuple(starts)
            )
        )
    return rows


def turn_rows(row: AgentRow, advantages: Sequence[float]) -> list[dict[str, torch.Tensor]]:
    """A row per turn of `row` that sampled a token: the ids up to the turn's end, the loss on the
    turn's tokens, the turn's advantage as its reward."""
    ids = row.tensors["input_ids"][0]
    bounds = [*row.turn_bounds, len(ids)]
    out = []
    for k, advantage in enumerate(advantages):
        start, end = bounds[k], bounds[k + 1]
        loss_mask = row.tensors["loss_mask"][0, :end].clone()
        loss_mask[:start] = 0
        if not loss_mask.any():
            continue
        cut = {key: value[:, :end] for key, value in row.tensors.items() if key != "rewards"}
        out.append({**cut, "loss_mask": loss_mask.unsqueeze(0), "rewards": torch.tensor([advantage])})
    return out


def _tensors(
    ids: list[int], loss_mask: list[int], logprobs: list[float], versions: list[int], *, reward: float
) -> dict[str, torch.Tensor]:
    row = {
        "input_ids": torch.tensor(ids, dtype=torch.int32),
        "loss_mask": torch.tensor(loss_mask, dtype=torch.int32),
        "logprobs": torch.tensor(logprobs, dtype=torch.float32),
        "versions": torch.tensor(versions, dtype=torch.int32),
        "attention_mask": torch.ones(len(ids), dtype=torch.bool),
        "rewards": torch.tensor(reward, dtype=torch.float32),
    }
    return {key: value.unsqueeze(0) for key, value in row.items()}
