"""Credit per turn on a multi-turn task: `grpo` against `gigpo` and the discounted per-turn return.

The calculator agent on the embedded model (examples/calculator/grpo_local_gigpo.yaml): a turn
calls the calculator, a later turn answers from its result, so the answer's credit depends on
the call before it. One reward for all three: the exact answer, and -0.2 on a turn whose tool
call failed (`rewards.calculator:answer_and_tool_errors`). Each estimator under each seed in its
own process, on the same tasks in the same order (the seed fixes the batches and the sampling).
Printed per run: held-out accuracy (50 tasks) before and after, the train reward per step, wall
time and peak RSS; then per estimator the means over seeds.

    python bench/credit.py [--seeds 0 1] [--steps 8] [--estimators grpo gigpo discounted] [--out DIR]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from runs import run_config

CONFIG = "examples/calculator/grpo_local_gigpo.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--estimators", nargs="+", default=["grpo", "gigpo", "discounted"])
    parser.add_argument("--out", type=Path, default=None, help="run folders (default: a temporary folder)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="credit-"))
    results = []
    for seed in args.seeds:
        for estimator in args.estimators:
            row = run_config(CONFIG, seed, args.steps, out, [f"algorithm.advantage={estimator}"], estimator)
            results.append(row)
            curve = " ".join(f"{r:.2f}" for r in row["curve"])
            shared, total = row["later_turns_recurring"]
            print(
                f"{estimator:10s} seed {seed}: held-out {row['before']:.0%} -> {row['after']:.0%} | "
                f"train reward by step {curve} | later turns on a recurring state {shared}/{total} | "
                f"{row['wall_s'] / 60:.1f} min | peak RSS {row['peak_mb']:,.0f} MB",
                flush=True,
            )
    print(f"\nover seeds {args.seeds} ({args.steps} steps; run folders in {out}):")
    for estimator in args.estimators:
        rows = [r for r in results if r["config"] == estimator]
        print(
            f"{estimator:10s} held-out after {statistics.fmean(r['after'] for r in rows):.0%} "
            f"(each: {', '.join(format(r['after'], '.0%') for r in rows)}), before "
            f"{statistics.fmean(r['before'] for r in rows):.0%}, train reward at the last step "
            f"{statistics.fmean(r['curve'][-1] for r in rows):.2f}"
        )


if __name__ == "__main__":
    main()
