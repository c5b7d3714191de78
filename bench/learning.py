"""Does a feature help learning? A matrix of task x engine x variant x seed, each run measured.

Every comparison pits variants against its first (the baseline) on the task built to show it,
under the same seeds (a seed fixes the batches, the sampling and the held-out draws, so runs of one
seed are paired). Each run is one `aworld-train run` in its own process (bench/runs.py), read from
its run folder the same way whatever the engine (evaluation/run_summary.py): held-out accuracy
before, after and at every evaluation between, sampled tokens, wall time, peak RSS.

Results are appended to a JSONL file as each run lands (the matrix need not run in one go: a run
already recorded is skipped), and `report` turns them into a markdown table (mean and spread over
seeds, a verdict per comparison) and a PNG of held-out accuracy by step per variant.

    python bench/learning.py list                                  # the matrix, and what is recorded
    python bench/learning.py run [--only credit policies] [--seeds 0 1] [--variants local] [--dry-run]
    python bench/learning.py report [--markdown docs/learning_table.md] [--png docs/learning.png]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from runs import ROOT, run_config

RESULTS = ROOT / "bench" / "results" / "learning.jsonl"
AREAL_PYTHON = {"AWORLD_TRAIN_AREAL_PYTHON": str(ROOT / ".venv-areal" / "bin" / "python")}
VLLM_PYTHON = {"AWORLD_TRAIN_VLLM_PYTHON": str(ROOT / ".venv-vllm" / "bin" / "python")}
# where an engine's Python is: not a training setting, so not part of what identifies a run
WHERE_PYTHON_IS = {*AREAL_PYTHON, *VLLM_PYTHON}


@dataclass(frozen=True)
class Variant:
    """One way to train: a config and its overrides (and the environment its engine needs)."""

    name: str
    config: str
    overrides: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    revision: str = ""  # a change to the code it measures: runs on record from before it stop counting


@dataclass(frozen=True)
class Comparison:
    name: str
    question: str
    steps: int
    seeds: tuple[int, ...]
    variants: tuple[Variant, ...]  # the first is the baseline
    size: tuple[str, ...] = ()  # overrides every variant's run takes (held-out tasks, evaluations)

    def overrides(self, variant: Variant) -> tuple[str, ...]:
        return self.size + variant.overrides

    def key(self, variant: Variant, seed: int) -> str:
        """What identifies a run, so that comparisons sharing a baseline at one size share its runs."""
        key: list = [variant.config, sorted(self.overrides(variant)), seed, self.steps]
        settings = sorted((k, v) for k, v in variant.env.items() if k not in WHERE_PYTHON_IS)
        key += [settings] if settings else []
        return json.dumps(key + [variant.revision] if variant.revision else key)


CALC_LOCAL = Variant("local", "examples/calculator/grpo_local.yaml")
GIGPO = ("algorithm.advantage=gigpo", "algorithm.gamma=0.95")
DISCOUNTED = ("algorithm.advantage=discounted", "algorithm.gamma=0.95")
# bf16 on a CPU with native bf16 matmuls: the local backend's default there until float32 replaced it
BF16_LOCAL = Variant("bf16", CALC_LOCAL.config, env={"AWORLD_TRAIN_DTYPE": "bfloat16"})
STEPS_LOCAL = Variant("grpo", "examples/multistep/grpo_local.yaml")
STORY_SHARED = Variant("shared policy", "examples/story_team/grpo_local.yaml")

# Sizes, for two one-thread runs side by side on 2 cores (OMP_NUM_THREADS=1). The calculator is
# mastered in about 8 steps, so its comparisons ask "does this learn as the baseline does" at 5 steps
# on 30 held-out tasks, evaluated every step (8-15 minutes a run; from 13-20% to 60-97%: float32
# comes near the ceiling, so a variant that learns faster still would hardly show). The tasks built
# to show a feature run the 40 steps their gains take, on 30 held-out tasks: about 40 minutes a run
# on the story team, about an hour on the multi-step task (docs/BENCHMARKS.md).
CALCULATOR_SIZE = ("data.max_test=30", "trainer.eval_every=1", "trainer.log_trajectories=0")
HEADROOM_SIZE = ("data.max_test=30", "trainer.eval_every=10", "trainer.log_trajectories=0")

MATRIX = (
    Comparison(
        "engines-calculator",
        "Do the three engines learn the calculator alike, evaluated one way?",
        5,
        (0, 1),
        (
            CALC_LOCAL,
            Variant("verl", "examples/calculator/grpo_verl_cpu.yaml"),
            Variant("areal", "examples/calculator/grpo_areal_cpu.yaml", env=AREAL_PYTHON),
        ),
        CALCULATOR_SIZE,
    ),
    Comparison(
        "sampler",
        "Does vLLM's sampler learn as the learner's own transformers model does?",
        5,
        (0, 1),
        (CALC_LOCAL, Variant("vllm", CALC_LOCAL.config, ("rollout.engine=vllm",), env=VLLM_PYTHON)),
        CALCULATOR_SIZE,
    ),
    Comparison(
        "dtype",
        "Does a bf16 model (its optimizer's float32 masters rounded into it after each step) learn as "
        "a float32 one, the CPU's default, does?",
        5,
        (0, 1),
        (BF16_LOCAL, Variant("float32 (the default)", CALC_LOCAL.config)),
        CALCULATOR_SIZE,
    ),
    Comparison(
        "async",
        "Does sampling a step ahead (max_staleness 1) learn as the synchronous loop does?",
        5,
        (0, 1),
        (CALC_LOCAL, Variant("async (max_staleness 1)", CALC_LOCAL.config, ("algorithm.max_staleness=1",))),
        CALCULATOR_SIZE,
    ),
    Comparison(
        "lora",
        "Does a LoRA adapter learn as full fine-tuning does?",
        5,
        (0, 1),
        (
            CALC_LOCAL,
            Variant(
                "lora (rank 16, lr 2e-4)",
                CALC_LOCAL.config,
                ("algorithm.lora.rank=16", "algorithm.lora.alpha=32", "algorithm.lr=2.0e-4"),
            ),
        ),
        CALCULATOR_SIZE,
    ),
    Comparison(
        "credit",
        "Does credit per turn beat the episode's return where later calls depend on earlier ones?",
        40,
        (0, 1, 2),
        (
            STEPS_LOCAL,
            Variant("gigpo", STEPS_LOCAL.config, GIGPO, revision="ties unscaled"),
            Variant("discounted", STEPS_LOCAL.config, DISCOUNTED, revision="ties unscaled"),
        ),
        HEADROOM_SIZE,
    ),
    Comparison(
        "policies",
        "Does a policy per agent beat one shared policy when the roles need different skills?",
        40,
        (0, 1, 2),
        (STORY_SHARED, Variant("a policy per agent", "examples/story_team/grpo_local_policies.yaml")),
        HEADROOM_SIZE,
    ),
    Comparison(
        "team-credit",
        "Does rewarding each agent for its own part teach the story team where the team's reward does not?",
        40,
        (0, 1, 2),
        (
            STORY_SHARED,
            Variant(
                "a reward per agent",
                STORY_SHARED.config,
                ("reward.fn=aworld_train.rewards.story_team:each_agents_part",),
            ),
        ),
        HEADROOM_SIZE,
    ),
    Comparison(
        "engines-multistep",
        "Do the three engines learn the multi-step task alike?",
        40,
        (0, 1),
        (
            STEPS_LOCAL,
            Variant("verl", "examples/multistep/grpo_verl_cpu.yaml"),
            Variant("areal", "examples/multistep/grpo_areal_cpu.yaml", env=AREAL_PYTHON),
        ),
        HEADROOM_SIZE,
    ),
)


# -- the record ---------------------------------------------------------------------------------
def recorded(path: Path) -> dict[str, dict]:
    """The runs recorded so far, by key (a later record of one key replaces an earlier one)."""
    if not path.is_file():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {row["key"]: row for row in rows}


def machine(env: dict[str, str]) -> str:
    """The machine a run starts on, and the settings of its environment (`env`: the variant's)."""
    load = os.getloadavg()[0]
    run_env = {**os.environ, **env}
    threads = run_env.get("OMP_NUM_THREADS", "all")
    dtype = run_env.get("AWORLD_TRAIN_DTYPE", "the default")
    return f"{os.cpu_count()} cores, {threads} thread(s), dtype {dtype}, load {load:.1f} at the start"


def run_missing(
    comparisons: list[Comparison],
    seeds: list[int] | None,
    path: Path,
    dry_run: bool,
    variants: list[str] | None = None,
) -> None:
    done = recorded(path)
    out = Path(tempfile.mkdtemp(prefix="learning-"))
    todo = [
        (c, v, seed)
        for c in comparisons
        for v in c.variants
        for seed in (seeds or c.seeds)
        if c.key(v, seed) not in done and (not variants or v.name in variants)
    ]
    todo = list({c.key(v, seed): (c, v, seed) for c, v, seed in todo}.values())
    print(f"{len(todo)} runs to go (run folders in {out}; results appended to {path})", flush=True)
    for c, v, seed in todo:
        print(f"- {c.name}: {v.name} seed {seed}, {c.steps} steps", flush=True)
        if dry_run:
            continue
        started = machine(v.env)
        name = f"{c.name}-{v.name}".replace(" ", "_").replace("/", "_")
        result = run_config(v.config, seed, c.steps, out, c.overrides(v), name, v.env)
        row = {
            "key": c.key(v, seed),
            "comparison": c.name,
            "variant": v.name,
            "config": v.config,
            "overrides": list(c.overrides(v)),
            "seed": seed,
            "steps": c.steps,
            "machine": started,
            "date": time.strftime("%Y-%m-%d %H:%M"),
            **{
                k: result[k]
                for k in (
                    "before",
                    "after",
                    "eval_curve",
                    "curve",
                    "sampled_tokens",
                    "later_turns_recurring",
                    "failed_episodes",
                    "wall_s",
                    "peak_mb",
                )
            },
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        failed = row["failed_episodes"]
        print(
            f"  held-out {row['before']:.0%} -> {row['after']:.0%}, {row['sampled_tokens']:,} sampled tokens, "
            f"{row['wall_s'] / 60:.1f} min, peak RSS {row['peak_mb']:,.0f} MB, failed episodes: "
            f"{failed['train']} in training, {failed['eval']} held-out",
            flush=True,
        )


# -- the report -----------------------------------------------------------------------------------
def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def verdict(base: list[dict], other: list[dict]) -> str:
    """The difference of mean held-out accuracy after training over the seeds both ran (runs of one
    seed are paired), and whether it exceeds the spread (the larger of the two sample standard
    deviations over those seeds) and all seeds agree on its sign."""
    a = {r["seed"]: r["after"] for r in base}
    b = {r["seed"]: r["after"] for r in other}
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return "no seed run by both"
    paired = [b[s] - a[s] for s in seeds]
    diff = statistics.fmean(paired)
    if len(seeds) < 2:
        return f"{diff:+.0%} (seed {seeds[0]} only: no spread yet)"
    spread = max(_mean_std([a[s] for s in seeds])[1], _mean_std([b[s] for s in seeds])[1])
    signs = "all seeds agree" if min(paired) > 0 or max(paired) < 0 else "seeds disagree"
    beyond = "beyond the spread" if abs(diff) > spread else "inside the spread"
    return f"{diff:+.0%} ({beyond} of {spread:.0%}; {signs})"


def report_rows(comparisons: list[Comparison], done: dict[str, dict]) -> list[str]:
    lines = [
        "| comparison | variant | runs (seeds) | held-out before | held-out after | against the baseline "
        "| sampled tokens | wall per run | failed episodes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in comparisons:
        base_rows: list[dict] = []
        for i, v in enumerate(c.variants):
            rows = [done[c.key(v, s)] for s in c.seeds if c.key(v, s) in done]
            if not rows:
                lines.append(f"| {c.name} | {v.name} | not run | | | | | | |")
                continue
            base_rows = rows if i == 0 else base_rows
            before, after = _mean_std([r["before"] for r in rows]), _mean_std([r["after"] for r in rows])
            against = "baseline" if i == 0 else (verdict(base_rows, rows) if base_rows else "no baseline run")
            walls = ", ".join(f"{r['wall_s'] / 60:.0f}" for r in rows)
            tokens = statistics.fmean(r["sampled_tokens"] for r in rows)
            seeds = ", ".join(str(r["seed"]) for r in rows)
            lines.append(
                f"| {c.name} ({c.steps} steps) | {v.name} | {len(rows)} ({seeds}) | {before[0]:.0%} ± {before[1]:.0%} "
                f"| {after[0]:.0%} ± {after[1]:.0%} | {against} | {tokens:,.0f} | {walls} min | {_failed(rows)} |"
            )
    return lines


def _failed(rows: list[dict]) -> str:
    """Failed episodes per run, in training + held-out (a run recorded before they were counted: ?)."""
    counts = [r.get("failed_episodes") for r in rows]
    return ", ".join("?" if f is None else f"{f['train']} + {f['eval']}" for f in counts)


def plot(comparisons: list[Comparison], done: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [c for c in comparisons if any(c.key(v, s) in done for v in c.variants for s in c.seeds)]
    if not shown:
        return
    cols = min(3, len(shown))
    rows = -(-len(shown) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax, c in zip(axes.flat, shown, strict=False):
        for v in c.variants:
            runs = [done[c.key(v, s)] for s in c.seeds if c.key(v, s) in done]
            if not runs:
                continue
            steps = sorted({step for r in runs for step, _ in r["eval_curve"]})
            means = [
                statistics.fmean(a for r in runs for st, a in r["eval_curve"] if st == step) for step in steps
            ]
            ax.plot(steps, means, marker="o", label=f"{v.name} ({len(runs)} seeds)")
        ax.set_title(c.name, fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel("held-out accuracy")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    for ax in list(axes.flat)[len(shown) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=["list", "run", "report"])
    parser.add_argument("--only", nargs="+", help="comparisons to run or report (default: all)")
    parser.add_argument(
        "--seeds", type=int, nargs="+", help="run these seeds only (default: each comparison's)"
    )
    parser.add_argument("--variants", nargs="+", help="run these variants only (by name, e.g. local verl)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the JSONL record of every run")
    parser.add_argument("--dry-run", action="store_true", help="list the runs `run` would start")
    parser.add_argument("--markdown", type=Path, help="write the table here too")
    parser.add_argument("--png", type=Path, default=ROOT / "docs" / "learning.png")
    args = parser.parse_args()
    names = [c.name for c in MATRIX]
    unknown = sorted(set(args.only or []) - set(names))
    if unknown:
        sys.exit(f"--only: unknown comparison {', '.join(unknown)}; choose among {', '.join(names)}")
    chosen = [c for c in MATRIX if not args.only or c.name in args.only]
    if args.action == "run":
        run_missing(chosen, args.seeds, args.results, args.dry_run, args.variants)
        return
    done = recorded(args.results)
    if args.action == "list":
        for c in chosen:
            have = sum(c.key(v, s) in done for v in c.variants for s in c.seeds)
            print(f"{c.name}: {c.question} {len(c.variants)} variants x seeds {list(c.seeds)}, {c.steps} steps; "
                  f"{have} of {len(c.variants) * len(c.seeds)} runs recorded")  # fmt: skip
        return
    table = "\n".join(report_rows(chosen, done)) + "\n"
    print(table)
    if args.markdown:
        args.markdown.write_text(table)
    plot(chosen, done, args.png)
    print(f"plot: {args.png}")


if __name__ == "__main__":
    main()
