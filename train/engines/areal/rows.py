"""An episode as AReaL's trainer reads it: a row per ledger segment of each trained agent, and under
an advantage per turn (`algorithm.advantage` gigpo or discounted) a row per turn.

An agent that rewrites its history (a summary, a trimmed or compacted history) has several ledger
segments in an episode: each is a row, with its tokens as sampled, so none of the episode's turns
is lost. The advantages are computed per unit (`AgentRows`: one agent's segments in one episode),
so GRPO's group baseline counts an episode once however many rows it gives; every row of a unit
carries the unit's advantage (under gigpo or discounted, each turn its own). AReaL's loss is a
token mean over its mini-batch, so an episode weighs its sampled tokens however it is cut.

AReaL gives every token of a row the row's reward (its actor's discount 1, no critic), so an
advantage of its own per turn needs a row of its own: turn k's row is the segment up to the end of
turn k, its loss on turn k's sampled tokens only, its reward turn k's advantage. The prefix is the
same ids the turn was sampled after, so AReaL recomputes the same logprobs.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

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
class SegmentRow:
    """One ledger segment as a row of AReaL's batch (tensors of shape [1, L])."""

    tensors: dict[str, torch.Tensor]
    segment: int = -1  # the segment it holds, by index in the trajectory's segments
    first_turn: int = 0  # where its turns begin among its unit's turns
    turn_bounds: tuple[int, ...] = ()  # where each of its turns begins in input_ids

    def turns_of(self, per_unit: Sequence) -> list:
        """This segment's share of a per-turn list of its unit (rewards, advantages)."""
        return list(per_unit[self.first_turn : self.first_turn + len(self.turn_bounds)])


@dataclass(frozen=True)
class AgentRows:
    """One agent's rows of an episode (a row per segment; for an episode that trains nothing, one
    row without loss), with the reward it is trained for and its turns over all its segments."""

    agent: str
    reward: float
    rows: tuple[SegmentRow, ...]
    turns: tuple[Turn, ...] = ()  # every turn of the unit: its reward and the state it acted on

    @property
    def loss_tokens(self) -> int:
        return sum(int(row.tensors["loss_mask"].sum()) for row in self.rows)

    @property
    def trained_segments(self) -> int:
        """Its rows with a loss token."""
        return sum(bool(row.tensors["loss_mask"].any()) for row in self.rows)


def areal_rows(
    traj: Trajectory,
    prompt_fallback: list[int],
    pad_id: int,
    train_on_malformed: bool = False,
    *,
    frozen_agents: Collection[str] = (),
) -> list[AgentRows]:
    """A trajectory as AReaL's trainer reads it: each trained agent's segments as rows; an episode
    that trains nothing gives one row without loss."""
    samples = episode_samples(traj, train_on_malformed, frozen_agents)
    units = agent_units([samples], [0])
    if not units:
        ids = (traj.segments[0].prompt_ids if traj.segments else list(prompt_fallback)) + [pad_id]
        empty = [0] * len(ids)
        tensors = _tensors(ids, empty, [0.0] * len(ids), [NOT_SAMPLED] * len(ids), reward=samples.reward)
        return [AgentRows("", samples.reward, (SegmentRow(tensors),))]
    out = []
    for unit in units:
        rows, first = [], 0
        for sample in unit.segments:
            ids = sample.prompt_ids + sample.response_ids
            loss_mask = [0] * len(sample.prompt_ids) + sample.response_mask
            logprobs = [0.0] * len(sample.prompt_ids) + sample.response_logprobs
            tensors = _tensors(ids, loss_mask, logprobs, token_versions(sample), reward=unit.reward)
            starts = tuple(turn_starts(sample))
            rows.append(SegmentRow(tensors, sample.index, first, starts))
            first += len(starts)
        out.append(AgentRows(unit.agent, unit.reward, tuple(rows), tuple(unit_turns(unit))))
    return out


def trained_rows(
    unit: AgentRows, advantages: Sequence[float], per_turn: bool
) -> list[dict[str, torch.Tensor]]:
    """What AReaL trains of a unit, given one advantage per turn of it: each segment's row with
    its first turn's advantage as its reward (grpo: every turn's), or (`per_turn`) a row per turn."""
    out = []
    for row in unit.rows:
        own = row.turns_of(advantages)
        if per_turn:
            out.extend(turn_rows(row, own))
        else:
            out.append({**row.tensors, "rewards": torch.tensor([own[0]], dtype=torch.float32)})
    return out


def turn_rows(row: SegmentRow, advantages: Sequence[float]) -> list[dict[str, torch.Tensor]]:
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
