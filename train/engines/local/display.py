"""What a local run shows as it trains: a progress bar on a terminal, one plain line per step
into a pipe or a log file, the step's mismatch warning, and the run's closing lines."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from aworld_train.engines.logprob_mismatch import MEAN, TOKENS, mismatch_text, mismatch_warning, with_warning

console = Console(stderr=True)


class StepDisplay:
    """The steps of one run, from `first` (a resumed run's) to `steps`. rich draws its bar only on
    a terminal; into a pipe or a log file (CI, nohup) each step gets a plain line instead, or
    nothing would show until the run ends."""

    def __init__(self, steps: int, first: int, mismatch_tolerance: float | None) -> None:
        self.steps, self.tolerance = steps, mismatch_tolerance
        self.plain = not console.is_terminal
        self.progress = Progress(
            TextColumn("[bold]GRPO"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(
                "reward {task.fields[reward]:.3f} | success {task.fields[success]:.2f} | "
                "tools {task.fields[tools]:.2f} | {task.fields[step_s]:.1f}s/step"
            ),
            TimeElapsedColumn(),
            console=console,
            disable=self.plain,
        )
        self.bar = self.progress.add_task(
            "train", total=steps, completed=first, reward=0.0, success=0.0, tools=0.0, step_s=0.0
        )

    def __enter__(self) -> StepDisplay:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def step(self, done: int, metrics: dict[str, Any]) -> None:
        """Step `done` trained with `metrics`."""
        self.progress.update(
            self.bar,
            advance=1,
            reward=metrics["reward_mean"],
            success=metrics["success_rate"],
            tools=metrics["tool_call_rate"],
            step_s=metrics["step_s"],
        )
        if self.plain:  # one line whatever the width: a log is read with grep
            line = step_line(done, self.steps, metrics, self.tolerance)
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        elif warning := mismatch_warning(metrics, self.tolerance):
            console.print(f"[yellow]step {done}: {escape(warning)}")


def step_line(done: int, steps: int, metrics: dict[str, Any], mismatch_tolerance: float | None = None) -> str:
    """One step's progress as a plain line, with the logprob mismatch where the step measured one
    (and its warning, over `mismatch_tolerance`)."""
    line = (
        f"GRPO step {done}/{steps}: reward {metrics['reward_mean']:.3f} | success "
        f"{metrics['success_rate']:.2f} | tools {metrics['tool_call_rate']:.2f} | {status_mix(metrics)} | "
        f"{metrics['step_s']:.1f}s/step"
    )
    if "dropped_stale" in metrics:
        line += (
            f" | staleness {metrics['staleness_mean']:.2f} (max {metrics['staleness_max']:.0f})"
            f" | dropped stale {metrics['dropped_stale']:.0f}"
        )
    line += mismatch_text(metrics) + policies_text(metrics)
    warning = mismatch_warning(metrics, mismatch_tolerance)
    return with_warning(line, warning)


def policies_text(metrics: dict[str, Any]) -> str:
    """A run with a policy per agent: each policy's trained samples, those with signal, its mismatch."""
    names = dict.fromkeys(key.split("/")[1] for key in metrics if key.startswith("policy/"))
    parts = []
    for name in names:
        own = {
            key.rsplit("/", 1)[1]: value
            for key, value in metrics.items()
            if key.startswith(f"policy/{name}/")
        }
        if "samples" not in own:
            parts.append(f"{name} no samples")
            continue
        part = f"{name} {own['samples']:.0f} samples ({own['samples_with_signal']:.0f} with signal)"
        parts.append(part + (f", mismatch {own[MEAN]:.4f}" if own.get(TOKENS) else ""))
    return f" | policies: {'; '.join(parts)}" if parts else ""


def status_mix(metrics: dict[str, Any]) -> str:
    """How the step's episodes ended, most first: `ok 14, truncated 1, malformed_tool_call 1`."""
    counts = sorted((metrics.get("statuses") or {}).items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{status} {count}" for status, count in counts) or "no episodes"


def show_done(summary: dict[str, Any], run_dir: Path) -> None:
    """The run's closing lines: its steps, the reward curve, the viewer (the held-out figures
    follow, in the line every engine's run ends with: facade/trainer.py)."""
    console.print(
        f"[bold green]done[/]: {summary['steps']} steps; mean held-out reward "
        f"{_num(summary['mean_reward_before'])} -> {_num(summary['mean_reward_after'])}; reward curve "
        f"{summary['reward_curve']}"
    )
    view = escape(f"aworld-train view {shlex.quote(str(run_dir))}")
    console.print(f"every episode, token by token: [bold]{view}")


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
