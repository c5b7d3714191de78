"""verl's episodes into the run folder's token files (`rollout/samples/token_log.py`).

verl runs all sessions of a prompt group in one agent-loop worker (`_run_prompt` of its
AgentLoopWorker), so each worker process keeps a group's episodes until the last one ends and
writes them as one part file: `tokens/step_<global_steps>/` for training, and
`tokens/eval/step_<global_steps>/` for the validation rows (`extra_info.split` of the rendered
val.parquet). A group whose last episode never comes (its loop raised) is written with the
episodes it has once `max_wait_s` passed, when the worker finishes its next episode.

verl computes advantages and its own logprobs later, in its trainer process: those stay null. The
weight versions an episode was sampled with are verl's server fields `min_global_steps` and
`max_global_steps`.
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aworld_train.rollout.episodes.trajectory import Trajectory
from aworld_train.rollout.samples.token_log import TOKENS_DIR, EpisodeNotes, episode_row, step_set, write_part

SPLIT_FIELD = "split"  # in a rendered row's extra_info: train or val


@dataclass
class _Group:
    folder: Path
    size: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    since: float = field(default_factory=time.monotonic)


class GroupWriter:
    """One worker process's open groups, written as each completes."""

    def __init__(self, root: Path, max_wait_s: float = 300.0) -> None:
        self.root = root
        self.max_wait_s = max_wait_s
        self._groups: dict[str, _Group] = {}

    def add(
        self, key: str, size: int, set_name: str, row: dict[str, Any]
    ) -> list[tuple[Path, list[dict[str, Any]]]]:
        """Keep `row`; the part files now due: its group if complete, and groups waited on too long."""
        group = self._groups.setdefault(key, _Group(self.root / set_name, size))
        group.rows.append(row)
        now = time.monotonic()
        due = [k for k, g in self._groups.items() if len(g.rows) >= g.size or now - g.since > self.max_wait_s]
        return [(g.folder, g.rows) for g in (self._groups.pop(k) for k in due)]


@functools.cache
def group_writer(run_dir: str) -> GroupWriter:
    """The worker's writer of a run folder (verl builds a loop object per episode)."""
    return GroupWriter(Path(run_dir) / TOKENS_DIR)


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


async def record_episode(
    writer: GroupWriter,
    run_kwargs: dict[str, Any],
    traj: Trajectory,
    server_fields: dict[str, Any],
    *,
    train_n: int,
    val_n: int,
) -> None:
    """Keep one finished episode of verl's agent loop; write its group once complete."""
    validating = (run_kwargs.get("extra_info") or {}).get(SPLIT_FIELD) == "val"
    step = _int(run_kwargs.get("global_steps"))
    low, high = _int(server_fields.get("min_global_steps")), _int(server_fields.get("max_global_steps"))
    span = (low, high if high is not None else low) if low is not None else None
    key = str(run_kwargs.get("uid") or traj.episode_id)
    notes = EpisodeNotes(group=key, version_span=span)
    row = episode_row(traj, "eval" if validating else "train", step, notes)
    name = step_set(step or 0)
    due = writer.add(key, val_n if validating else train_n, f"eval/{name}" if validating else name, row)
    for folder, rows in due:
        await asyncio.to_thread(write_part, folder, rows)
