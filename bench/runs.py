"""One `aworld-train run` of a config under a seed, in its own process, measured: what the paired
benches (team_policies.py, credit.py) compare."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_config(
    config: str, seed: int, steps: int, out: Path, overrides: Sequence[str] = (), name: str | None = None
) -> dict:
    """Held-out accuracy before and after, the train reward per step, wall time and peak RSS
    (/usr/bin/time: the run's alone). Exits naming the run where it fails."""
    run_dir = out / f"{name or Path(config).stem}-seed{seed}"
    command = [
        "/usr/bin/time", "-v", sys.executable, "-m", "aworld_train.facade.cli", "run", config,
        f"trainer.seed={seed}", f"trainer.steps={steps}", f"trainer.run_dir={run_dir}", "trainer.save_every=0",
        *overrides,
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(
            f"{name or config} seed {seed} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [row for row in rows if row.get("phase") == "eval"]
    return {
        "config": name or config,
        "seed": seed,
        "before": evals[0]["accuracy"],
        "after": evals[-1]["accuracy"],
        "curve": [row["reward_mean"] for row in rows if "reward_mean" in row and row.get("phase") != "eval"],
        "wall_s": wall,
        "peak_mb": peak_kb / 1024,
    }
