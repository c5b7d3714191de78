"""An agent that keeps its context under a budget by summarising, against the same agent cut at the
budget, on the long task (examples/long_reports/): daily reports of about 170 tokens, three or four
per question, within `rollout.max_total_tokens: 1024`.

- `summary`: grpo_local.yaml, AWorld's own summary written by the policy from the second report on
  (its notes replace the reports before the latest one, and they train);
- `cut`: grpo_local_cut.yaml, the same agent seeing its whole history; an episode that outgrows the
  budget ends truncated.

Each variant under each seed in its own process (runs.py), on the same tasks in the same order.
Printed per run and as means over seeds: held-out accuracy before and after, the tokens trained
(sampled by the policy in the training steps), segments per episode, the share of training
episodes that ended truncated (at the budget or at a call's own token limit), wall time and peak RSS.

    python bench/compaction.py [--seeds 0 1] [--steps 10] [--held-out 30] [--variants summary cut] [--out DIR]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections import Counter
from pathlib import Path

from aworld_train.rollout.samples.token_log import PART_GLOB, TOKENS_DIR
from runs import run_config

VARIANTS = {
    "summary": "examples/long_reports/grpo_local.yaml",
    "cut": "examples/long_reports/grpo_local_cut.yaml",
}


def episode_shapes(run_dir: Path) -> tuple[float, float]:
    """Over the run's training episodes: mean segments per episode, share that ended truncated."""
    import pyarrow.parquet as pq

    segments, statuses = [], Counter()
    for part in sorted((run_dir / TOKENS_DIR).glob(f"step_*/{PART_GLOB}")):
        for row in pq.read_table(part, columns=["status", "segments"]).to_pylist():
            segments.append(len(row["segments"] or []))
            statuses[row["status"]] += 1
    episodes = sum(statuses.values())
    return (statistics.fmean(segments) if segments else 0.0), statuses["truncated"] / max(episodes, 1)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--held-out", type=int, default=30, help="test tasks evaluated before and after")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--out", type=Path, default=None, help="run folders (default: a temporary folder)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="compaction-"))
    results = []
    for seed in args.seeds:
        for variant in args.variants:
            overrides = [f"data.max_test={args.held_out}", f"trainer.eval_every={args.steps}"]
            row = run_config(VARIANTS[variant], seed, args.steps, out, overrides, name=variant)
            row["segments"], row["truncated"] = episode_shapes(out / f"{variant}-seed{seed}")
            results.append(row)
            print(
                f"{variant:8s} seed {seed}: held-out {row['before']:.0%} -> {row['after']:.0%} | "
                f"tokens trained {row['sampled_tokens']:,} | segments per episode {row['segments']:.2f} | "
                f"truncated {row['truncated']:.0%} | {row['wall_s'] / 60:.1f} min | "
                f"peak RSS {row['peak_mb']:,.0f} MB",
                flush=True,
            )
    print(
        f"\nover seeds {args.seeds} ({args.steps} steps, {args.held_out} held-out tasks; run folders in {out}):"
    )
    print(
        "| variant | held-out before | held-out after | tokens trained | segments per episode | truncated |"
    )
    print("|---|---|---|---|---|---|")
    for variant in args.variants:
        rows = [r for r in results if r["config"] == variant]

        def mean(key: str, rows: list[dict] = rows) -> float:
            return statistics.fmean(r[key] for r in rows)

        print(
            f"| {variant} | {mean('before'):.0%} | {mean('after'):.0%} "
            f"(each: {', '.join(format(r['after'], '.0%') for r in rows)}) | {mean('sampled_tokens'):,.0f} "
            f"| {mean('segments'):.2f} | {mean('truncated'):.0%} |"
        )


if __name__ == "__main__":
    main()
