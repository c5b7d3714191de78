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

from aworld_train.rollout.samples.credit import anchor_text

CONFIG = "examples/calculator/grpo_local_gigpo.yaml"


def recurring_turns(run_dir: Path) -> tuple[int, int]:
    """Over the run's trained turns after the first (the first acts on the task's prompt, which
    every sample of the task shares): how many acted on a state another turn of their group also
    acted on (where gigpo's step level has something to compare), and how many there were."""
    import pyarrow.parquet as pq

    shared = total = 0
    for step in sorted((run_dir / "tokens").glob("step_*")):
        states: dict[tuple[str, str], int] = {}
        for part in step.glob("part-*.parquet"):
            for row in pq.read_table(part, columns=["group", "segments"]).to_pylist():
                trained = [seg for seg in row["segments"] if seg["turn_advantages"] is not None]
                observations = [o for seg in trained for o in seg["turn_observations"]]
                for observation in observations[1:]:
                    key = (row["group"], anchor_text(observation))
                    states[key] = states.get(key, 0) + 1
        total += sum(states.values())
        shared += sum(n for n in states.values() if n > 1)
    return shared, total


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
            shared, total = recurring_turns(out / f"{estimator}-seed{seed}")
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
