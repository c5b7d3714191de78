"""The line every engine's run ends with: held-out accuracy, pass@1, pass@k and mean@k before and
after training, read from the run folder's evaluation token files (`tokens/eval/...`), which the
local backend, verl's agent loop and AReaL's workflow all write, so that the three engines report
one figure computed one way."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from aworld_train.evaluation.held_out import HeldOut
from aworld_train.evaluation.report import CORRECT, pass_at_k
from aworld_train.rollout.samples.token_log import PART_GLOB, TOKENS_DIR

_STEP_SET = re.compile(r"^step_(\d+)$")


@dataclass(frozen=True)
class HeldOutFigures:
    """One evaluation's figures over its tasks; a failed episode counts as reward 0."""

    episodes: int
    accuracy: float
    pass_at_1: float
    pass_at_k: float
    mean_at_k: float

    @classmethod
    def of(cls, rewards_by_group: dict[str, list[float]], k: int) -> HeldOutFigures:
        """Figures over the held-out groups (a task under a seed): pass@k and mean@k per group,
        averaged, as `aworld-train eval` averages them over tasks and seeds."""
        tasks = [r for r in rewards_by_group.values() if r]
        episodes = sum(len(r) for r in tasks)

        def over_tasks(value) -> float:
            return sum(value(r) for r in tasks) / len(tasks) if tasks else 0.0

        def passes(rewards: list[float], at: int) -> float:
            return pass_at_k(len(rewards), sum(x >= CORRECT for x in rewards), min(at, len(rewards)))

        return cls(
            episodes=episodes,
            accuracy=sum(x >= CORRECT for r in tasks for x in r) / max(episodes, 1),
            pass_at_1=over_tasks(lambda r: passes(r, 1)),
            pass_at_k=over_tasks(lambda r: passes(r, k)),
            mean_at_k=over_tasks(lambda r: sum(r) / len(r)),
        )

    def text(self, k: int) -> str:
        at_k = f" pass@{k} {self.pass_at_k:.3f}" if k > 1 else ""
        return (
            f"accuracy {self.accuracy:.1%} (pass@1 {self.pass_at_1:.3f}{at_k} mean@{k} {self.mean_at_k:.3f})"
        )


def eval_sets(run_dir: str | Path) -> tuple[str | None, str | None]:
    """The names of a run's evaluation before training and its last one (`eval/before` and
    `eval/after` where the run wrote them, else the first and last `eval/step_N`), or None."""
    root = Path(run_dir) / TOKENS_DIR / "eval"
    if not root.is_dir():
        return None, None
    steps = sorted(
        (int(m.group(1)), f"eval/{p.name}") for p in root.iterdir() if (m := _STEP_SET.match(p.name))
    )
    named = {p.name for p in root.iterdir() if any(p.glob(PART_GLOB))}
    before = "eval/before" if "before" in named else (steps[0][1] if steps and steps[0][0] == 0 else None)
    after = "eval/after" if "after" in named else (steps[-1][1] if steps and steps[-1][0] > 0 else None)
    return before, after


def rewards_by_group(run_dir: str | Path, set_name: str) -> dict[str, list[float]]:
    """The rewards of each task's samples under each seed in an evaluation set, by held-out group
    (`task/seed_S`, evaluation/report.py: held_out_group; a set written without one: the task)."""
    import pyarrow.parquet as pq

    out: dict[str, list[float]] = defaultdict(list)
    for part in sorted((Path(run_dir) / TOKENS_DIR / set_name).glob(PART_GLOB)):
        for row in pq.read_table(part, columns=["task_id", "group", "reward"]).to_pylist():
            out[row["group"] or row["task_id"]].append(row["reward"] or 0.0)
    return dict(out)


def held_out_figures(run_dir: str | Path, k: int) -> dict[str, HeldOutFigures | None]:
    """The run's figures before training and after its last evaluation (None: not evaluated)."""
    before, after = eval_sets(run_dir)
    return {
        label: HeldOutFigures.of(rewards_by_group(run_dir, name), k) if name else None
        for label, name in (("before", before), ("after", after))
    }


def held_out_line(engine: str, figures: dict[str, HeldOutFigures | None], held: HeldOut) -> str:
    """`held-out (<engine>; k=.., temperature .., .. turns, seeds ..): before ... -> after ...`."""
    parts = [
        f"{label} {value.text(held.k)}" if value is not None else f"{label} not evaluated"
        for label, value in figures.items()
    ]
    return f"held-out ({engine}; {held.describe()}): {' -> '.join(parts)}"


def eval_curve(run_dir: str | Path, k: int) -> list[tuple[int, HeldOutFigures]]:
    """Every evaluation of a run in step order: (the weight updates before it, its figures)."""
    import pyarrow.parquet as pq

    root = Path(run_dir) / TOKENS_DIR / "eval"
    points = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        parts = sorted(folder.glob(PART_GLOB))
        if not parts:
            continue
        step = pq.read_table(parts[0], columns=["step"]).column("step")[0].as_py()
        step = int(m.group(1)) if step is None and (m := _STEP_SET.match(folder.name)) else step
        points.append((step or 0, HeldOutFigures.of(rewards_by_group(run_dir, f"eval/{folder.name}"), k)))
    return sorted(points, key=lambda point: point[0])
