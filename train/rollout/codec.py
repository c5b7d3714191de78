"""The one conversion between our tasks and engine rows, and from trajectories to training samples.

Every engine goes through here, so the rules are the same everywhere:

- A task travels as one JSON field (`aworld_task`) inside the engine's row and comes back
  equal, system message included.
- A failed episode (a status in FAILED_STATUSES, or a malformed tool call without
  `train_on_malformed`) carries no loss and takes no place in its group's baseline.
- An episode whose agent rewrote its history has several ledger segments; every engine
  trains the first one and counts the others as `segments_dropped` (verl and AReaL take
  one row per sample, and a group's rows must stay one per episode).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aworld_train.rollout.trajectory import Task, Trajectory

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
class EpisodeSample:
    """What an engine trains on from one episode: its first segment, or nothing."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]  # the loss mask: the ledger's, or all 0 for a failed episode
    sampled_mask: list[int]  # the ledger's: 1 where the policy sampled the token
    response_logprobs: list[float]
    reward: float
    in_baseline: bool  # False: a failed episode, outside its group's mean and std
    segments_dropped: int

    @property
    def trainable(self) -> bool:
        return self.in_baseline and any(self.response_mask)


def episode_sample(traj: Trajectory, train_on_malformed: bool = False) -> EpisodeSample | None:
    """The one sample of `traj` (None when the episode sampled nothing at all)."""
    seg = next((s for s in traj.segments if s.response_ids), None)
    if seg is None:
        return None
    usable = traj.trainable(train_on_malformed)
    return EpisodeSample(
        prompt_ids=list(seg.prompt_ids),
        response_ids=list(seg.response_ids),
        response_mask=list(seg.response_mask) if usable else [0] * len(seg.response_mask),
        sampled_mask=list(seg.response_mask),
        response_logprobs=list(seg.response_logprobs),
        reward=float(traj.reward or 0.0) if usable else 0.0,
        in_baseline=usable,
        segments_dropped=max(0, len(traj.segments) - 1),
    )
