"""A policy per agent against one shared policy, on the calculator team (planner, calculator agent).

Runs `aworld-train run` on each config under each seed, one process each (timed by /usr/bin/time,
so the peak RSS is that run's alone), every run on the same tasks in the same order (the seed also
fixes the batches): the team demo as it trains today (one policy, every weight) and the same team
with an adapter per agent (`grpo_local_policies.yaml`), and optionally any other config named.
Printed per run: held-out accuracy before and after, wall time and peak RSS; then per config the
means over seeds and the ratios of the policy-per-agent run's peak memory and wall to the shared
run's (the same seed's, measured here).

    python bench/team_policies.py [--seeds 0 1] [--steps 8] [--configs A.yaml B.yaml] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = "examples/calculator_team/grpo_local.yaml"
POLICIES = "examples/calculator_team/grpo_local_policies.yaml"


def run_once(config: str, seed: int, steps: int, out: Path) -> dict:
    run_dir = out / f"{Path(config).stem}-seed{seed}"
    command = [
        "/usr/bin/time", "-v", sys.executable, "-m", "aworld_train.facade.cli", "run", config,
        f"trainer.seed={seed}", f"trainer.steps={steps}", f"trainer.run_dir={run_dir}", "trainer.save_every=0",
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(
            f"{config} seed {seed} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
    evals = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [row for row in evals if row.get("phase") == "eval"]
    return {
        "config": config,
        "seed": seed,
        "before": evals[0]["accuracy"],
        "after": evals[-1]["accuracy"],
        "wall_s": wall,
        "peak_mb": peak_kb / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--configs", nargs="+", default=[SHARED, POLICIES])
    parser.add_argument("--out", type=Path, default=None, help="run folders (default: a temporary folder)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="team-policies-"))
    results = []
    for seed in args.seeds:
        for config in args.configs:
            row = run_once(config, seed, args.steps, out)
            results.append(row)
            print(
                f"{Path(config).stem:28s} seed {seed}: held-out {row['before']:.0%} -> {row['after']:.0%} | "
                f"{row['wall_s'] / 60:.1f} min | peak RSS {row['peak_mb']:,.0f} MB",
                flush=True,
            )
    print(f"\nover seeds {args.seeds} ({args.steps} steps; run folders in {out}):")
    by_config = {c: [r for r in results if r["config"] == c] for c in args.configs}
    base = by_config[args.configs[0]]
    for config, rows in by_config.items():
        line = (
            f"{Path(config).stem:28s} after {statistics.fmean(r['after'] for r in rows):.0%} "
            f"(each: {', '.join(format(r['after'], '.0%') for r in rows)}), before "
            f"{statistics.fmean(r['before'] for r in rows):.0%}"
        )
        if config != args.configs[0]:
            memory = [r["peak_mb"] / b["peak_mb"] for r, b in zip(rows, base, strict=True)]
            wall = [r["wall_s"] / b["wall_s"] for r, b in zip(rows, base, strict=True)]
            line += f" | peak RSS x{statistics.fmean(memory):.2f}, wall x{statistics.fmean(wall):.2f} of the first"
        print(line)


if __name__ == "__main__":
    main()
