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
import statistics
import tempfile
from pathlib import Path

from runs import run_config

SHARED = "examples/calculator_team/grpo_local.yaml"
POLICIES = "examples/calculator_team/grpo_local_policies.yaml"


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
            row = run_config(config, seed, args.steps, out)
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
