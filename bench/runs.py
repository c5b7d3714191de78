"""One `aworld-train run` of a config under a seed, in its own process, measured: what the paired
benches (learning.py, team_policies.py, credit.py) compare. Every engine's run is read the same
way, from its run folder's token files (evaluation/run_summary.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from aworld_train.evaluation.run_summary import eval_curve, held_out_figures
from aworld_train.rollout.episodes.trajectory import FAILED_STATUSES
from aworld_train.rollout.samples.credit import anchor_text
from aworld_train.rollout.samples.token_log import PART_GLOB, TOKENS_DIR

ROOT = Path(__file__).resolve().parents[1]


def sampled_tokens(run_dir: Path) -> int:
    """Tokens the policy sampled in the run's training steps (what the learner was given)."""
    import pyarrow.parquet as pq

    return sum(
        sum(pq.read_table(part, columns=["sampled_tokens"]).column("sampled_tokens").to_pylist())
        for step in (run_dir / TOKENS_DIR).glob("step_*")
        for part in step.glob(PART_GLOB)
    )


def recurring_turns(run_dir: Path) -> tuple[int, int]:
    """Over the run's trained turns after the first (the first acts on the task's prompt, which
    every sample of the task shares): how many acted on a state another turn of their group also
    acted on (where gigpo's step level has something to compare), and how many there were."""
    import pyarrow.parquet as pq

    shared = total = 0
    for step in sorted((run_dir / TOKENS_DIR).glob("step_*")):
        states: dict[tuple[str, str], int] = {}
        for part in step.glob(PART_GLOB):
            for row in pq.read_table(part, columns=["group", "segments"]).to_pylist():
                trained = [seg for seg in row["segments"] if seg["turn_advantages"] is not None]
                observations = [o for seg in trained for o in seg["turn_observations"]]
                for observation in observations[1:]:
                    key = (row["group"], anchor_text(observation))
                    states[key] = states.get(key, 0) + 1
        total += sum(states.values())
        shared += sum(n for n in states.values() if n > 1)
    return shared, total


def failed_episodes(run_dir: Path) -> dict[str, int]:
    """Episodes that failed (a tool server down, a timeout: FAILED_STATUSES) in the run's training
    steps and in its held-out evaluations, from its token files (every engine writes them): a failed
    episode trains nothing and scores 0, so a run with many of them measures its machine as much
    as its learning."""
    import pyarrow.parquet as pq

    failed = {"train": 0, "eval": 0}
    root = run_dir / TOKENS_DIR
    for part in root.rglob(PART_GLOB):  # step_N/part-*, eval/<set>/part-*
        phase = "eval" if part.relative_to(root).parts[0] == "eval" else "train"
        statuses = pq.read_table(part, columns=["status"]).column("status").to_pylist()
        failed[phase] += sum(status in FAILED_STATUSES for status in statuses)
    return failed


def run_config(
    config: str,
    seed: int,
    steps: int,
    out: Path,
    overrides: Sequence[str] = (),
    name: str | None = None,
    env: Mapping[str, str] | None = None,
) -> dict:
    """Held-out accuracy before and after (and at every evaluation between), the train reward per
    step, sampled tokens, wall time, peak RSS (/usr/bin/time: the run's process tree's largest
    process) and failed episodes. The run's output is kept in its folder (run.log). Exits naming
    the run where it fails."""
    run_dir = out / f"{name or Path(config).stem}-seed{seed}"
    command = [
        "/usr/bin/time", "-v", sys.executable, "-m", "aworld_train.facade.cli", "run", config,
        f"trainer.seed={seed}", f"trainer.steps={steps}", f"trainer.run_dir={run_dir}", "trainer.save_every=0",
        *overrides,
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})}
    )
    wall = time.perf_counter() - started
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(
            f"{name or config} seed {seed} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
    figures = held_out_figures(run_dir, 1)
    metrics = run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.is_file() else []
    return {
        "config": name or config,
        "seed": seed,
        "before": figures["before"].accuracy if figures["before"] else None,
        "after": figures["after"].accuracy if figures["after"] else None,
        "eval_curve": [(step, f.accuracy) for step, f in eval_curve(run_dir, 1)],
        "curve": [row["reward_mean"] for row in rows if "reward_mean" in row and row.get("phase") != "eval"],
        "sampled_tokens": sampled_tokens(run_dir),
        "later_turns_recurring": recurring_turns(run_dir),
        "failed_episodes": failed_episodes(run_dir),
        "wall_s": wall,
        "peak_mb": peak_kb / 1024,
    }
