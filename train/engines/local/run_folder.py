"""The run folder: config snapshot, metrics (JSONL + TensorBoard), trajectories, checkpoints, reward curve.

runs/NAME/
  config.yaml  agent_spec.yaml  metrics.jsonl  tensorboard/  reward_curve.png
  trajectories/step_000001.jsonl   eval/before.jsonl  eval/after.jsonl
  tokens/step_000001/part-*.parquet  tokens/eval/before/part-*.parquet  (rollout/samples/token_log.py)
  checkpoints/step_000010/  (model + tokenizer + trainer_state.pt + complete.json, written last)

Every file is written whole or not at all (`atomic_files`): a trainer killed at any instant
leaves complete files, and `rewind` takes the folder back to a checkpoint's step before a
resumed run goes on, so no step is counted twice.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

from aworld_train.core.atomic_files import (
    PARTIAL_SUFFIX,
    REPLACED_SUFFIX,
    append_line,
    incomplete,
    replacing,
    write_lines,
)
from aworld_train.rollout.episodes.trajectory import Trajectory
from aworld_train.rollout.samples.token_log import TOKENS_DIR, EpisodeNotes, write_episodes

_STEP_DIR = re.compile(r"^step_(\d+)$")
# the step-numbered files a run writes: trajectories/step_000003.jsonl, eval/step_000005.jsonl
_STEP_FILE = re.compile(r"^step_(\d+)\.")


class RunFolder:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "checkpoints").mkdir(exist_ok=True)
        (self.path / "trajectories").mkdir(exist_ok=True)
        self._tb = None
        self._purge_step: int | None = None  # TensorBoard hides events from this step on

    # -- metrics ----------------------------------------------------------------
    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    def log(self, step: int, metrics: dict[str, Any], prefix: str = "train") -> None:
        record = {"step": step, "phase": prefix, "time": time.time(), **metrics}
        append_line(self.metrics_path, json.dumps(record, default=str))
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step: TensorBoard discards the events of the earlier writer from that step on
            self._tb = SummaryWriter(str(self.path / "tensorboard"), purge_step=self._purge_step)
        for key, value in metrics.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                self._tb.add_scalar(f"{prefix}/{key}", value, step)
        self._tb.flush()

    def history(self, phase: str = "train") -> list[dict[str, Any]]:
        return [r for r in self._records() if r.get("phase") == phase]

    def _records(self) -> list[dict[str, Any]]:
        """The metrics' records; a torn last line (a machine that went down mid-write) is skipped."""
        if not self.metrics_path.is_file():
            return []
        records = []
        for line in self.metrics_path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
        return records

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    # -- trajectories -------------------------------------------------------------
    def write_trajectories(
        self, name: str, trajectories: list[Trajectory], with_tokens: bool = False
    ) -> Path:
        lines = [json.dumps(traj.to_dict(with_tokens=with_tokens), default=str) for traj in trajectories]
        return write_lines(self.path / f"{name}.jsonl", lines)

    def write_tokens(
        self,
        set_name: str,
        trajectories: list[Trajectory],
        phase: str,
        step: int | None,
        notes: list[EpisodeNotes] | None = None,
    ) -> Path | None:
        """Every episode's tokens (tokens/<set_name>/), for `aworld-train view`."""
        return write_episodes(self.path / TOKENS_DIR, set_name, trajectories, phase, step, notes)

    # -- checkpoints ----------------------------------------------------------------
    def checkpoint_dir(self, step: int) -> Path:
        return self.path / "checkpoints" / f"step_{step:06d}"

    def checkpoints(self) -> list[tuple[int, Path, str | None]]:
        """Every checkpoint folder, latest first: (step, folder, why it is incomplete or None)."""
        found = []
        for child in (self.path / "checkpoints").iterdir():
            match = _STEP_DIR.match(child.name)
            if match and child.is_dir():
                found.append((int(match.group(1)), child, incomplete(child)))
        return sorted(found, reverse=True)

    def latest_checkpoint(self) -> tuple[int, Path] | None:
        """The latest complete checkpoint: one interrupted while it was written never counts."""
        return next(((step, path) for step, path, problem in self.checkpoints() if problem is None), None)

    def rewind(self, step: int) -> list[str]:
        """Take the folder back to the end of `step` before a resumed run goes on from there: the
        metrics of later steps dropped (rewritten atomically), TensorBoard told to discard its
        events from step + 1 on, the trajectories and evaluations of later steps, the final
        evaluation, later steps' token files, later (incomplete) checkpoints and partial folders
        removed. What it removed."""
        removed = []
        records = self._records()
        kept = [r for r in records if isinstance(r.get("step"), int) and r["step"] <= step]
        if self.metrics_path.is_file():  # rewritten whole: a torn last line goes too
            write_lines(self.metrics_path, [json.dumps(r, default=str) for r in kept])
        if len(kept) != len(records):
            removed.append(f"{len(records) - len(kept)} metrics record(s) past step {step}")
        self._purge_step = step + 1
        for folder in ("trajectories", "eval"):
            for file in sorted((self.path / folder).glob("step_*")):
                match = _STEP_FILE.match(file.name)
                if match and int(match.group(1)) > step:
                    file.unlink()
                    removed.append(str(file.relative_to(self.path)))
        tokens = self.path / TOKENS_DIR  # the viewer's token files, one folder a step
        for folder in sorted([*tokens.glob("step_*"), *(tokens / "eval").glob("step_*")]):
            match = _STEP_DIR.match(folder.name)
            if match and int(match.group(1)) > step:
                shutil.rmtree(folder)
                removed.append(str(folder.relative_to(self.path)))
        for after in (self.path / "eval" / "after.jsonl", tokens / "eval" / "after"):
            if after.exists():
                shutil.rmtree(after) if after.is_dir() else after.unlink()
                removed.append(str(after.relative_to(self.path)))
        for child in sorted((self.path / "checkpoints").iterdir()):
            match = _STEP_DIR.match(child.name)
            stale = child.name.endswith((PARTIAL_SUFFIX, REPLACED_SUFFIX))
            if stale or (match and int(match.group(1)) > step):
                shutil.rmtree(child)
                removed.append(str(child.relative_to(self.path)))
        return removed

    # -- the reward curve -------------------------------------------------------------
    def plot_reward_curve(self) -> Path | None:
        rows = self.history("train")
        if not rows:
            return None
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        steps = [r["step"] for r in rows]
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot(steps, [r.get("reward_mean", 0.0) for r in rows], marker="o", label="train reward (mean)")
        ax.plot(steps, [r.get("tool_call_rate", 0.0) for r in rows], linestyle="--", label="tool-call rate")
        evals = self.history("eval")
        if evals:
            ax.plot(
                [r["step"] for r in evals],
                [r["accuracy"] for r in evals],
                marker="s",
                label="held-out accuracy",
            )
        ax.set_xlabel("step")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="best")
        ax.set_title(self.path.name)
        fig.tight_layout()
        path = self.path / "reward_curve.png"
        try:
            with replacing(path) as tmp:
                fig.savefig(tmp, dpi=100, format="png")
        finally:
            plt.close(fig)
        return path
