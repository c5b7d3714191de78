"""The run folder: config snapshot, metrics (JSONL + TensorBoard), trajectories, checkpoints, reward curve.

runs/NAME/
  config.yaml  agent_spec.yaml  metrics.jsonl  tensorboard/  reward_curve.png
  trajectories/step_000001.jsonl   eval/before.jsonl  eval/after.jsonl
  tokens/step_000001/part-*.parquet  tokens/eval/before/part-*.parquet  (rollout/token_log.py)
  checkpoints/step_000010/  (model + tokenizer + trainer_state.pt)
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from aworld_train.rollout.token_log import TOKENS_DIR, EpisodeNotes, write_episodes
from aworld_train.rollout.trajectory import Trajectory

_STEP_DIR = re.compile(r"^step_(\d+)$")


class RunFolder:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "checkpoints").mkdir(exist_ok=True)
        (self.path / "trajectories").mkdir(exist_ok=True)
        self._tb = None

    # -- metrics ----------------------------------------------------------------
    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    def log(self, step: int, metrics: dict[str, Any], prefix: str = "train") -> None:
        record = {"step": step, "phase": prefix, "time": time.time(), **metrics}
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(record, default=str) + "\n")
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.path / "tensorboard"))
        for key, value in metrics.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                self._tb.add_scalar(f"{prefix}/{key}", value, step)
        self._tb.flush()

    def history(self, phase: str = "train") -> list[dict[str, Any]]:
        if not self.metrics_path.is_file():
            return []
        rows = [json.loads(line) for line in self.metrics_path.read_text().splitlines() if line.strip()]
        return [r for r in rows if r.get("phase") == phase]

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    # -- trajectories -------------------------------------------------------------
    def write_trajectories(
        self, name: str, trajectories: list[Trajectory], with_tokens: bool = False
    ) -> Path:
        path = self.path / f"{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")  # renamed when whole: a reader never sees half
        with tmp.open("w") as f:
            for traj in trajectories:
                f.write(json.dumps(traj.to_dict(with_tokens=with_tokens), default=str) + "\n")
        os.replace(tmp, path)
        return path

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

    def latest_checkpoint(self) -> tuple[int, Path] | None:
        found = []
        for child in (self.path / "checkpoints").iterdir():
            match = _STEP_DIR.match(child.name)
            if match and (child / "trainer_state.pt").is_file():
                found.append((int(match.group(1)), child))
        return max(found) if found else None

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
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path
