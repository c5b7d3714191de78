"""An evaluation suite's results (`aworld-train eval` over checkpoints and seeds): each metric's
mean and spread across seeds, per checkpoint, written as a markdown table, CSV files and a plot."""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from aworld_train.evaluation.report import EvalReport

METRICS = ("pass@1", "pass@k", "mean@k")


@dataclass
class CheckpointResult:
    label: str
    model: str
    k: int
    reports: dict[int, EvalReport] = field(default_factory=dict)  # by seed

    def values(self, metric: str) -> list[float]:
        out = []
        for report in self.reports.values():
            if metric == "pass@1":
                out.append(report.pass_at(1))
            elif metric == "pass@k":
                out.append(report.pass_at(self.k))
            elif metric == "mean@k":
                out.append(report.mean_at_k)
            else:
                out.append(float(getattr(report, metric)))
        return out

    def stats(self, metric: str) -> dict[str, float]:
        values = self.values(metric)
        return {
            "mean": statistics.fmean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values),
            "max": max(values),
        }


@dataclass
class SuiteResult:
    k: int
    seeds: list[int]
    results: list[CheckpointResult]
    out_dir: Path
    table_md: Path | None = None
    table_csv: Path | None = None
    seeds_csv: Path | None = None
    plot: Path | None = None

    @property
    def metrics(self) -> tuple[str, ...]:
        """The reported metrics; with k = 1, pass@k is pass@1 and is not repeated."""
        return METRICS if self.k > 1 else ("pass@1", "mean@k")

    def name(self, metric: str) -> str:
        return metric.replace("@k", f"@{self.k}")

    def markdown(self) -> str:
        k = self.k
        head = ["checkpoint", *map(self.name, self.metrics), "tool calls", "episodes", "failed"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in self.results:
            cells = [r.label]
            for metric in self.metrics:
                s = r.stats(metric)
                cells.append(
                    f"{s['mean']:.3f} ± {s['std']:.3f}" if len(self.seeds) > 1 else f"{s['mean']:.3f}"
                )
            cells.append(f"{r.stats('tool_call_rate')['mean']:.2f}")
            episodes = sum(rep.episodes for rep in r.reports.values())
            failed = sum(_failed(rep) for rep in r.reports.values())
            cells += [str(episodes), str(failed)]
            lines.append("| " + " | ".join(cells) + " |")
        seeds = ", ".join(str(s) for s in self.seeds)
        lines.append("")
        lines.append(
            f"k = {k} samples per task; seeds {seeds}; mean ± sample std across seeds; "
            "pass@k is the unbiased estimator 1 - C(n-c, k) / C(n, k)."
        )
        return "\n".join(lines) + "\n"

    def write(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.table_md = self.out_dir / "eval_table.md"
        self.table_md.write_text(self.markdown())
        k = self.k
        self.table_csv = self.out_dir / "eval_table.csv"
        with self.table_csv.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(
                ["checkpoint", "model", "k", "seeds", "episodes"]
                + [f"{self.name(m)}_{s}" for m in self.metrics for s in ("mean", "std", "min", "max")]
                + ["tool_call_rate", "failed"]
            )
            for r in self.results:
                row = [r.label, r.model, k, " ".join(map(str, self.seeds))]
                row.append(sum(rep.episodes for rep in r.reports.values()))
                for metric in self.metrics:
                    row += [round(v, 6) for v in r.stats(metric).values()]
                row.append(round(r.stats("tool_call_rate")["mean"], 6))
                row.append(sum(_failed(rep) for rep in r.reports.values()))
                writer.writerow(row)
        self.seeds_csv = self.out_dir / "eval_seeds.csv"
        with self.seeds_csv.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["checkpoint", "seed", *map(self.name, self.metrics), "episodes", "wall_s"])
            for r in self.results:
                for seed, rep in r.reports.items():
                    values = {"pass@1": rep.pass_at(1), "pass@k": rep.pass_at(k), "mean@k": rep.mean_at_k}
                    writer.writerow(
                        [r.label, seed, *(round(values[m], 6) for m in self.metrics)]
                        + [rep.episodes, round(rep.wall_s, 1)]
                    )
        self.plot = self._plot()

    def _plot(self) -> Path:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        k = self.k
        width = 0.8 / len(self.metrics)
        fig, ax = plt.subplots(figsize=(max(5.0, 1.8 * len(self.results) + 2), 4))
        xs = range(len(self.results))
        for i, metric in enumerate(self.metrics):
            stats = [r.stats(metric) for r in self.results]
            name = self.name(metric)
            ax.bar(
                [x + (i - (len(self.metrics) - 1) / 2) * width for x in xs],
                [s["mean"] for s in stats],
                width,
                yerr=[s["std"] for s in stats],
                capsize=3,
                label=name,
            )
        ax.set_xticks(list(xs), [r.label for r in self.results], rotation=15, ha="right")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("score")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(loc="best")
        ax.set_title(f"k={k}, seeds {', '.join(map(str, self.seeds))} (error bars: std across seeds)")
        fig.tight_layout()
        path = self.out_dir / "eval_plot.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path


def _failed(report: EvalReport) -> int:
    from aworld_train.rollout.episodes.trajectory import FAILED_STATUSES

    return sum(n for status, n in report.statuses.items() if status in FAILED_STATUSES)
