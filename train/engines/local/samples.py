"""The local learner's samples: the ledger segments of a step's trainable trajectories with their
advantages (`build_samples`), packed into micro-batches by a token budget, collated into padded
tensors, and the staleness of their tokens (which weights older than the update's sampled them)."""

from __future__ import annotations

from collections.abc import Collection, Sized
from dataclasses import dataclass, field
from typing import TypeVar

import torch

from aworld_train.rollout.episodes.trajectory import Trajectory
from aworld_train.rollout.samples.codec import agent_units, episode_samples
from aworld_train.rollout.samples.credit import (
    Credit,
    token_advantages,
    turn_advantages,
    turn_starts,
    unit_turns,
)
from aworld_train.rollout.tokens.ledger import NO_VERSION


@dataclass
class Sample:
    ids: list[int]
    prompt_len: int
    mask: list[int]  # over response positions
    old_logprobs: list[float]  # over response positions
    advantage: float
    origin: tuple[int, int] | None = None  # (trajectory, segment) it was built from
    # the learner's logprobs of the mask-1 tokens, under the weights that sampled them; None
    # where it computed none (a zero-advantage sample without KL, a later mini-batch)
    trainer_logprobs: list[float] | None = None
    # per response position: the weight version that sampled the token (ledger.NO_VERSION: none)
    versions: list[int] = field(default_factory=list)
    # the current weights' logprobs where older weights sampled, the recorded ones elsewhere;
    # None where every token is the current weights' own
    proximal_logprobs: list[float] | None = None
    agent: str = ""  # the team's agent whose segment it is ("" for a lone agent's)
    # per response position, where turns have advantages of their own (gigpo, discounted): each
    # sampled token its turn's; None: `advantage` on every token
    token_advantages: list[float] | None = None
    turn_rewards: list[float] = field(default_factory=list)  # r_t of the segment's turns
    turn_advantages: list[float] = field(default_factory=list)  # and their advantages
    # its share of its unit's loss tokens (an agent's episode, over the segments its rewrites cut it
    # into): seq-mean-token-mean weighs a sample by it, so an episode counts once however cut
    loss_share: float = 1.0

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def has_signal(self) -> bool:
        """Some loss token has a non-zero advantage."""
        if self.token_advantages is None:
            return self.advantage != 0.0
        return any(a != 0.0 for a in self.token_advantages)


def build_samples(
    trajectories: list[Trajectory],
    group_of: list,
    credit: Credit = Credit(),
    train_on_malformed: bool = False,
    frozen_agents: Collection[str] = (),
) -> tuple[list[Sample], list[float]]:
    """Samples for the loss and the advantage of every trajectory (0 for those left out; a team's
    episode: its first trained agent's first turn's).

    The codec's rules: a failed episode has no sample and no place in its group's baseline;
    every segment of an agent in an episode is a sample, compared with the same agent in the
    other samples of the task; frozen agents give none. Each turn's advantage is the estimator's
    (rollout/samples/credit.py), over units: a unit is counted once in its group's baseline however
    many segments it has; under `grpo` every turn of a unit has the same one."""
    episodes = [episode_samples(t, train_on_malformed, frozen_agents) for t in trajectories]
    units = agent_units(episodes, group_of)
    turns = [unit_turns(u) for u in units]
    per_turn = turn_advantages(
        credit.estimator,
        turns,
        [u.group for u in units],
        credit.gamma,
        credit.step_weight,
        credit.norm_by_std,
    )
    advantages: list[float | None] = [None] * len(trajectories)
    samples = []
    for unit, unit_turn_list, unit_advantages in zip(units, turns, per_turn, strict=True):
        if advantages[unit.episode] is None:  # every unit has a turn: its segments' first
            advantages[unit.episode] = unit_advantages[0]
        done, unit_tokens = 0, sum(sum(seg.response_mask) for seg in unit.segments)
        for seg in unit.segments:
            count = len(turn_starts(seg))
            seg_advantages = unit_advantages[done : done + count]
            samples.append(
                Sample(
                    seg.prompt_ids + seg.response_ids,
                    len(seg.prompt_ids),
                    seg.response_mask,
                    seg.response_logprobs,
                    seg_advantages[0],
                    origin=(unit.episode, seg.index),
                    versions=list(seg.response_versions),
                    agent=unit.agent,
                    token_advantages=None
                    if credit.estimator == "grpo"
                    else token_advantages(seg, seg_advantages),
                    turn_rewards=[t.reward for t in unit_turn_list[done : done + count]],
                    turn_advantages=list(seg_advantages),
                    loss_share=sum(seg.response_mask) / unit_tokens,
                )
            )
            done += count
    return samples, [0.0 if a is None else a for a in advantages]


# anything with a length in tokens packs: GRPO samples and SFT samples alike
Packable = TypeVar("Packable", bound=Sized)


def micro_batches(samples: list[Packable], token_budget: int) -> list[list[Packable]]:
    """Greedy packing by padded size (rows x longest row) within the budget; one oversize sample stands alone."""
    batches: list[list[Packable]] = []
    current: list[Packable] = []
    for sample in sorted(samples, key=len):  # ascending: the newest sample is the widest
        if current and len(sample) * (len(current) + 1) > token_budget:
            batches.append(current)
            current = []
        current.append(sample)
    if current:
        batches.append(current)
    return batches


def collate(batch: list[Sample], pad_id: int, device, version: int | None = None) -> dict[str, torch.Tensor]:
    """The padded tensors of a micro-batch; `stale`: its loss tokens weights older than `version`
    sampled (none without a version)."""
    width = max(len(s) for s in batch)
    n = len(batch)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    # targets are ids[:, 1:]; loss positions are response tokens
    mask = torch.zeros((n, width - 1))
    old = torch.zeros((n, width - 1))
    behaviour = torch.zeros((n, width - 1))
    stale = torch.zeros((n, width - 1))
    per_token = any(s.token_advantages is not None for s in batch)
    adv = torch.zeros((n, width - 1 if per_token else 1))
    for i, s in enumerate(batch):
        ids[i, : len(s)] = torch.tensor(s.ids)
        attention[i, : len(s)] = 1
        start = s.prompt_len - 1
        mask[i, start : start + len(s.mask)] = torch.tensor(s.mask, dtype=torch.float)
        proximal = s.old_logprobs if s.proximal_logprobs is None else s.proximal_logprobs
        old[i, start : start + len(proximal)] = torch.tensor(proximal, dtype=torch.float)
        behaviour[i, start : start + len(s.old_logprobs)] = torch.tensor(s.old_logprobs, dtype=torch.float)
        if version is not None:
            stale[i, start : start + len(s.mask)] = torch.tensor(
                stale_positions(s, version), dtype=torch.float
            )
        if not per_token:
            adv[i, 0] = s.advantage
        elif s.token_advantages is None:
            adv[i, start : start + len(s.mask)] = s.advantage
        else:
            adv[i, start : start + len(s.token_advantages)] = torch.tensor(s.token_advantages)
    tensors = {
        "ids": ids,
        "attention": attention,
        "mask": mask,
        "old": old,
        "adv": adv,
        "behaviour": behaviour,
        "stale": stale,
        "share": torch.tensor([s.loss_share for s in batch], dtype=torch.float),
    }
    return {k: v.to(device) for k, v in tensors.items()}


def stale_positions(sample: Sample, version: int) -> list[bool]:
    """Per response position: a loss token that weights older than `version` sampled."""
    return [
        bool(m) and v != NO_VERSION and v < version
        for m, v in zip(sample.mask, sample.versions or [NO_VERSION] * len(sample.mask), strict=True)
    ]


def importance_weights(proximal: torch.Tensor, behaviour: torch.Tensor, stale: torch.Tensor) -> list[float]:
    """pi_prox / pi_behaviour at the stale positions, untruncated (for the step's metrics)."""
    return torch.exp((proximal - behaviour)[stale > 0].clamp(max=20.0)).tolist()


def staleness_stats(
    samples: list[Sample], version: int, weights: list[float], cap: float
) -> dict[str, float]:
    """The step's stale tokens (loss tokens of older weights, trained or not) and the importance
    weights of those it trained, as metrics."""
    return {
        "stale_tokens": float(sum(sum(stale_positions(s, version)) for s in samples)),
        "importance_weight_mean": sum(min(w, cap) for w in weights) / len(weights) if weights else 1.0,
        "importance_truncated_frac": sum(w > cap for w in weights) / len(weights) if weights else 0.0,
    }


def hand_back(micro: list[Sample], logprobs: torch.Tensor, mask: torch.Tensor) -> None:
    """Each sample's logprobs at its loss positions, kept on the sample for the run's token files."""
    for row, sample in enumerate(micro):
        sample.trainer_logprobs = logprobs[row][mask[row] > 0].float().tolist()
