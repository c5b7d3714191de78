"""The run folder's token files: every episode's exact tokens, kept for people to read
(`aworld-train view`), written the same way by every engine.

    RUN/tokens/<set>/part-<pid>-<n>-<tag>.parquet
    <set>: step_000001 (a training step), eval/before, eval/step_000005, ...

A set is a folder of part files: the local backend writes one per step, verl's agent-loop
workers one per prompt group, AReaL's workflow one per task group. One row per episode,
zstd-compressed parquet. Per segment (a ledger segment: one agent, one unbroken history): the
token ids, the mask, each policy call's start (`turn_starts`), and one value per *sampled* token
(mask 1) of: the sampled logprob, the trainer's logprob where the engine recomputed it, the weight
version where the engine has one. A position the policy did not sample therefore holds no
logprob at all, so no reader can take it for a logprob of 0; a value an engine does not know is
null, never 0. Per episode: ids, group, phase and step, status and error, reward, advantage,
the weight versions' span, agents, tool names, the trajectory's JSON (messages, tool calls with
latency and status, reward extras, timings), and what a fresh chat-template render of the
conversation needs (each agent's tools, few-shot turns, and messages in the form its ledger read).

A part file is written under a hidden temporary name and renamed: a reader never sees half of one.
"""

from __future__ import annotations

import itertools
import json
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from aworld_train.rollout.episodes.trajectory import Trajectory
from aworld_train.rollout.tokens.ledger import NO_VERSION, Segment

FORMAT_VERSION = 1
TOKENS_DIR = "tokens"
PART_GLOB = "part-*.parquet"
# rows per row group: a reader opening one episode decodes its row group, not the whole file
ROW_GROUP = 32

SEGMENT = pa.struct(
    [
        ("agent", pa.string()),
        ("prompt_ids", pa.list_(pa.int32())),
        ("response_ids", pa.list_(pa.int32())),
        ("response_mask", pa.list_(pa.int8())),
        ("turn_starts", pa.list_(pa.int32())),
        # one value per mask-1 token, in order; null where the engine does not know them
        ("sampled_logprobs", pa.list_(pa.float32())),
        ("trainer_logprobs", pa.list_(pa.float32())),
        ("versions", pa.list_(pa.int32())),
        ("advantage", pa.float64()),
        # per turn (one per turn_starts entry): its reward r_t and its advantage; null where the
        # engine does not know them
        ("turn_observations", pa.list_(pa.string())),  # what each turn acted on: its state
        ("turn_rewards", pa.list_(pa.float64())),
        ("turn_advantages", pa.list_(pa.float64())),
    ]
)
SCHEMA = pa.schema(
    [
        ("episode_id", pa.string()),
        ("task_id", pa.string()),
        ("group", pa.string()),
        ("phase", pa.string()),
        ("step", pa.int32()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("reward", pa.float64()),
        ("advantage", pa.float64()),
        ("num_turns", pa.int32()),
        ("tool_calls", pa.int32()),
        ("tool_errors", pa.int32()),
        ("tool_names", pa.list_(pa.string())),
        ("agents", pa.list_(pa.string())),
        ("tokens", pa.int32()),
        ("sampled_tokens", pa.int32()),
        ("version_min", pa.int32()),
        ("version_max", pa.int32()),
        ("trajectory", pa.string()),  # Trajectory.to_dict(with_tokens=False), JSON
        # JSON {agent: {"tools": [...], "few_shot": [...]}}: the same in most episodes, so parquet's
        # dictionary encoding stores it about once per file
        ("render_context", pa.string()),
        # JSON {agent: messages}: each agent's last call's messages as its ledger read them, and the reply
        ("conversations", pa.string()),
        ("segments", pa.list_(SEGMENT)),
    ],
    metadata={"aworld_train.tokens": str(FORMAT_VERSION)},
)
# the columns an index of a set needs: everything but the tokens and the conversation
INDEX_COLUMNS = [name for name in SCHEMA.names if name not in ("segments", "render_context", "conversations")]


@dataclass
class EpisodeNotes:
    """What an engine knows of an episode beyond its trajectory; empty or None where it does not."""

    group: str = ""
    advantage: float | None = None  # None: the episode was not trained (or the engine computes it later)
    segment_advantages: dict[int, float] = field(default_factory=dict)  # by index in traj.segments
    # by index in traj.segments: its turns' rewards and advantages
    turn_rewards: dict[int, list[float]] = field(default_factory=dict)
    turn_advantages: dict[int, list[float]] = field(default_factory=dict)
    trainer_logprobs: dict[int, list[float]] = field(default_factory=dict)  # one per sampled token
    version_span: tuple[int, int] | None = None  # the engine's weight versions, oldest and newest


def _sampled(values: Sequence, mask: Sequence[int]) -> list:
    return [v for v, m in zip(values, mask, strict=True) if m]


def _segment_versions(seg: Segment) -> list[int] | None:
    """The versions of the segment's sampled tokens (None where the engine reported none)."""
    sampled = [int(v) for v in _sampled(seg.response_versions, seg.response_mask)]
    return sampled if any(v != NO_VERSION for v in sampled) else None


def _segment_row(seg: Segment, index: int, notes: EpisodeNotes) -> dict[str, Any]:
    trainer = notes.trainer_logprobs.get(index)
    n_sampled = sum(seg.response_mask)
    if trainer is not None and len(trainer) != n_sampled:
        raise ValueError(
            f"segment {index} has {n_sampled} sampled tokens but {len(trainer)} trainer logprobs"
        )
    return {
        "agent": seg.agent,
        "prompt_ids": seg.prompt_ids,
        "response_ids": seg.response_ids,
        "response_mask": seg.response_mask,
        "turn_starts": seg.turn_starts,
        "sampled_logprobs": _sampled(seg.response_logprobs, seg.response_mask),
        "trainer_logprobs": trainer,
        "versions": _segment_versions(seg),
        "advantage": notes.segment_advantages.get(index),
        "turn_observations": seg.turn_observations,
        "turn_rewards": notes.turn_rewards.get(index),
        "turn_advantages": notes.turn_advantages.get(index),
    }


def _version_span(segments: list[dict[str, Any]], traj: Trajectory, notes: EpisodeNotes):
    """The oldest and newest weight versions that sampled the episode's tokens; none sampled: none."""
    if not any(s["sampled_logprobs"] for s in segments):
        return (None, None)
    known = [v for s in segments for v in (s["versions"] or []) if v != NO_VERSION]
    if notes.version_span is not None:
        known.extend(v for v in notes.version_span if v is not None and v != NO_VERSION)
    return (min(known), max(known)) if known else (None, None)


def episode_row(traj: Trajectory, phase: str, step: int | None, notes: EpisodeNotes | None = None) -> dict:
    notes = notes or EpisodeNotes()
    segments = [_segment_row(seg, i, notes) for i, seg in enumerate(traj.segments)]
    low, high = _version_span(segments, traj, notes)
    inputs = traj.prompt_inputs
    context = {
        agent: {"tools": given.get("tools"), "few_shot": given.get("few_shot") or []}
        for agent, given in inputs.items()
    }
    conversations = {agent: given.get("messages") or [] for agent, given in inputs.items()}
    agents = list(dict.fromkeys([seg.agent for seg in traj.segments] + list(inputs)))
    return {
        "episode_id": traj.episode_id,
        "task_id": str(traj.task_id),
        "group": notes.group,
        "phase": phase,
        "step": step,
        "status": traj.status,
        "error": traj.error,
        "reward": None if traj.reward is None else float(traj.reward),
        "advantage": notes.advantage,
        "num_turns": traj.num_turns,
        "tool_calls": len(traj.tool_calls),
        "tool_errors": sum(bool(c.error) for c in traj.tool_calls),
        "tool_names": sorted({c.name for c in traj.tool_calls}),
        "agents": agents,
        "tokens": sum(len(seg) for seg in traj.segments),
        "sampled_tokens": sum(sum(seg.response_mask) for seg in traj.segments),
        "version_min": low,
        "version_max": high,
        "trajectory": json.dumps(traj.to_dict(with_tokens=False), default=str),
        "render_context": json.dumps(context, default=str, sort_keys=True) if context else None,
        "conversations": json.dumps(conversations, default=str) if conversations else None,
        "segments": segments,
    }


_parts = itertools.count()


def write_part(folder: Path, rows: list[dict[str, Any]]) -> Path | None:
    """One part file of `rows` (episode_row's) in `folder`, written whole or not at all."""
    if not rows:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    name = f"part-{os.getpid()}-{next(_parts):06d}-{uuid.uuid4().hex[:8]}.parquet"
    tmp = folder / f".{name}.tmp"
    try:
        pq.write_table(
            pa.Table.from_pylist(rows, schema=SCHEMA),
            tmp,
            compression="zstd",
            compression_level=9,
            row_group_size=ROW_GROUP,
        )
        os.replace(tmp, folder / name)
    finally:
        tmp.unlink(missing_ok=True)
    return folder / name


def write_episodes(
    root: str | Path,
    set_name: str,
    trajectories: Sequence[Trajectory],
    phase: str,
    step: int | None = None,
    notes: Sequence[EpisodeNotes | None] | None = None,
) -> Path | None:
    """Episodes into the set `set_name` (step_000001, eval/before, ...) under the token folder `root`."""
    notes = list(notes) if notes is not None else [None] * len(trajectories)
    rows = [episode_row(t, phase, step, n) for t, n in zip(trajectories, notes, strict=True)]
    return write_part(Path(root) / set_name, rows)


def step_set(step: int) -> str:
    """The set name of a training step's episodes."""
    return f"step_{step:06d}"
