"""The one conversion between our tasks and engine rows, and from trajectories to training samples.

Every engine goes through here, so the rules are the same everywhere:

- A task travels as one JSON field (`aworld_task`) inside the engine's row and comes back
  equal, system message included.
- A failed episode (a status in FAILED_STATUSES, or a malformed tool call without
  `train_on_malformed`) carries no loss and takes no place in its group's baseline.
- GRPO's advantage is the reward less its group's mean (over its std), over the episodes that
  count: one function for every engine that normalises itself (local, AReaL's workflow).
- Every response token keeps the weight version that sampled it (ledger.NO_VERSION where none
  did): the staleness an engine measures is read from them.
- An episode whose agent rewrote its history has several ledger segments: each one is a
  sample with the episode's advantage. An engine that takes one row per agent and episode
  (AReaL) trains each agent's first and counts the others as `segments_dropped`.
- A team's episode has a ledger per agent; every segment names its agent. Frozen agents
  (`rollout.frozen_agents`) give no sample. Each trained agent's reward is the episode's, or
  the one the reward function gave it (`agent_rewards` in its extras), and GRPO compares an
  agent with the same agent in the other samples of its task (`agent_units`).
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aworld_train.rollout.episodes.trajectory import Task, Trajectory

TASK_FIELD = "aworld_task"
# Decoding sampled ids to text: the same settings on every engine, so a tool call parses the same.
DECODE_KWARGS = {"skip_special_tokens": True, "clean_up_tokenization_spaces": False}


# -- tasks <-> rows --------------------------------------------------------------------
def task_to_json(task: Task) -> str:
    return json.dumps(
        {
            "id": task.id,
            "user_turns": task.user_turns,
            "ground_truth": task.ground_truth,
            "system": task.system,
            "data_source": task.data_source,
            "extra_info": task.extra_info,
            "row": task.row,
        },
        default=str,
    )


def task_from_json(text: str) -> Task:
    data = json.loads(text)
    return Task(
        id=str(data["id"]),
        user_turns=list(data["user_turns"]),
        ground_truth=data.get("ground_truth"),
        system=data.get("system"),
        data_source=str(data.get("data_source", "aworld_train")),
        extra_info=dict(data.get("extra_info") or {}),
        row=dict(data.get("row") or {}),
    )


def chat_prompt(task: Task) -> list[dict[str, str]]:
    """The task's first prompt as chat messages (an engine's `prompt` column)."""
    system = [{"role": "system", "content": task.system}] if task.system else []
    return [*system, {"role": "user", "content": task.user_turns[0]}]


def ground_truth_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def task_from_foreign_row(row: dict[str, Any], index: Any = "") -> Task:
    """A row we did not write (a native verl parquet): chat `prompt`, `reward_model.ground_truth`."""
    messages = list(row.get("raw_prompt") or row.get("prompt") or [])
    turns = [m["content"] for m in messages if m.get("role") == "user"]
    system = next((m["content"] for m in messages if m.get("role") == "system"), None)
    extra = dict(row.get("extra_info") or {})
    truth = (row.get("reward_model") or {}).get("ground_truth")
    return Task(
        id=str(extra.get("task_id", extra.get("index", index))),
        user_turns=turns,
        ground_truth=truth,
        system=system,
        data_source=str(row.get("data_source", "aworld_train")),
        extra_info=extra,
        row={k: v for k, v in row.items() if k != "raw_prompt"},
    )


# -- trajectories -> samples --------------------------------------------------------------
@dataclass(frozen=True)
class SegmentSample:
    """One ledger segment as an engine trains it."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]  # the loss mask: the ledger's, or all 0 for a failed episode
    sampled_mask: list[int]  # the ledger's: 1 where the policy sampled the token
    response_logprobs: list[float]
    agent: str = ""  # whose ledger it comes from
    index: int = -1  # its place in the trajectory's segments (the token files key on it)
    # the weight version that sampled each response token; ledger.NO_VERSION where none did
    response_versions: list[int] = field(default_factory=list)
    turn_starts: list[int] = field(default_factory=list)  # the ledger's: where each LLM call began
    turn_observations: list[str] = field(default_factory=list)  # what each call acted on


@dataclass(frozen=True)
class EpisodeSamples:
    """What an engine trains on from one episode."""

    segments: list[SegmentSample]  # every segment the policy sampled in, in order
    reward: float
    in_baseline: bool  # False: a failed episode: no loss, outside its group's mean and std
    agent_rewards: dict[str, float] = field(default_factory=dict)  # where the reward named agents
    turn_rewards: dict[str, list[float]] = field(default_factory=dict)  # per agent, per LLM call

    @property
    def trainable(self) -> bool:
        return self.in_baseline and any(any(s.response_mask) for s in self.segments)

    def reward_of(self, agent: str) -> float:
        return self.agent_rewards.get(agent, self.reward)


def episode_samples(
    traj: Trajectory, train_on_malformed: bool = False, frozen_agents: Collection[str] = ()
) -> EpisodeSamples:
    usable = traj.trainable(train_on_malformed)
    segments = [
        SegmentSample(
            prompt_ids=list(seg.prompt_ids),
            response_ids=list(seg.response_ids),
            response_mask=list(seg.response_mask) if usable else [0] * len(seg.response_mask),
            sampled_mask=list(seg.response_mask),
            response_logprobs=list(seg.response_logprobs),
            agent=seg.agent,
            index=index,
            response_versions=list(seg.response_versions),
            turn_starts=list(seg.turn_starts),
            turn_observations=list(seg.turn_observations),
        )
        for index, seg in enumerate(traj.segments)
        if seg.response_ids and seg.agent not in frozen_agents
    ]
    if not usable:
        return EpisodeSamples(segments, 0.0, False)
    return EpisodeSamples(segments, float(traj.reward or 0.0), True, traj.agent_rewards, traj.turn_rewards)


@dataclass(frozen=True)
class AgentUnit:
    """One agent's samples of one episode: what GRPO gives one advantage."""

    episode: int  # index of the episode
    agent: str
    segments: list[SegmentSample]
    reward: float
    group: Hashable  # (the episode's group, the agent)
    turn_rewards: list[float] = field(default_factory=list)  # the reward function's, per LLM call


def agent_units(episodes: Sequence[EpisodeSamples], groups: Sequence[Hashable]) -> list[AgentUnit]:
    """The trainable agents' samples of every trainable episode, grouped by task and agent, in order."""
    units = []
    for index, (episode, group) in enumerate(zip(episodes, groups, strict=True)):
        if not episode.trainable:
            continue
        by_agent: dict[str, list[SegmentSample]] = {}
        for seg in episode.segments:
            by_agent.setdefault(seg.agent, []).append(seg)
        for agent, segments in by_agent.items():
            if any(any(s.response_mask) for s in segments):
                units.append(
                    AgentUnit(
                        index,
                        agent,
                        segments,
                        episode.reward_of(agent),
                        (group, agent),
                        episode.turn_rewards.get(agent, []),
                    )
                )
    return units


def group_advantages(
    rewards: Sequence[float],
    groups: Sequence[Hashable],
    norm_by_std: bool = True,
    eps: float = 1e-6,
    spread: Sequence[float] | None = None,
) -> list[float]:
    """(r - mean of its group) / (std of its group + eps); a group of one gets 0.

    std is the unbiased one, as verl's GRPO computes it (torch.std). `spread` (default: `rewards`)
    gives the values whose std scales each group, and a group whose spread is nil is not scaled:
    a discounted return is scaled by the spread of the undiscounted ones, so that episodes of equal
    reward, told apart by the discount alone, never get advantages the size of a reward difference."""
    by_group: dict[Hashable, list[int]] = defaultdict(list)
    for index, group in enumerate(groups):
        by_group[group].append(index)
    spread = rewards if spread is None else spread
    out = [0.0] * len(rewards)
    for members in by_group.values():
        if len(members) < 2:
            continue
        values = [float(rewards[i]) for i in members]
        mean = statistics.fmean(values)
        scale = group_scale([float(spread[i]) for i in members], norm_by_std, eps)
        for i, value in zip(members, values, strict=True):
            out[i] = (value - mean) / scale
    return out


def group_scale(spread: list[float], norm_by_std: bool, eps: float) -> float:
    """std + eps of a group's spread; 1 where it is nil (a tie) or norm_by_std is off."""
    std = statistics.stdev(spread)
    return std + eps if norm_by_std and std > eps else 1.0
