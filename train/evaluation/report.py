"""Evaluation: run the agent over tasks, k samples each, and report pass@k, mean@k, accuracy,
tool use, turns and failures."""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from aworld_train.evaluation.held_out import HeldOut
from aworld_train.rollout.episodes.runner import EpisodeRunner
from aworld_train.rollout.episodes.trajectory import Task, Trajectory
from aworld_train.rollout.policies.router import PolicyRouter
from aworld_train.rollout.samples.agent_stats import agent_metrics

CORRECT = 0.999  # a reward at or above this counts as a correct answer


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one task from n samples of which c are correct: 1 - C(n-c, k) / C(n, k).

    The chance that k samples drawn without replacement from the n hold at least one correct one.
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (got n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def held_out_group(task_id: str, seed: int | None) -> str:
    """The group of a held-out episode in the token files: its task under its eval seed."""
    return str(task_id) if seed is None else f"{task_id}/seed_{seed}"


@dataclass
class EvalReport:
    episodes: int
    accuracy: float
    mean_reward: float
    tool_call_rate: float
    mean_turns: float
    statuses: dict[str, int]
    wall_s: float
    trajectories: list[Trajectory] = field(default_factory=list, repr=False)
    samples_per_task: int = 1
    seeds: list[int | None] = field(default_factory=list, repr=False)  # each trajectory's eval seed

    @classmethod
    def of(
        cls,
        trajectories: list[Trajectory],
        wall_s: float,
        samples_per_task: int = 1,
        seeds: list[int | None] | None = None,
    ) -> EvalReport:
        n = max(len(trajectories), 1)
        rewards = [t.reward or 0.0 for t in trajectories]
        return cls(
            episodes=len(trajectories),
            accuracy=sum(r >= CORRECT for r in rewards) / n,
            mean_reward=sum(rewards) / n,
            tool_call_rate=sum(t.called_tool for t in trajectories) / n,
            mean_turns=sum(t.num_turns for t in trajectories) / n,
            statuses=dict(Counter(t.status for t in trajectories)),
            wall_s=wall_s,
            trajectories=trajectories,
            samples_per_task=samples_per_task,
            seeds=list(seeds) if seeds is not None else [None] * len(trajectories),
        )

    def groups(self) -> list[str]:
        """Each episode's held-out group, one per task and seed (`task/seed_S`): what pass@k is
        computed over, whichever engine wrote the episodes (evaluation/run_summary.py)."""
        return [
            held_out_group(t.task_id, seed) for t, seed in zip(self.trajectories, self.seeds, strict=True)
        ]

    def per_task(self) -> list[tuple[str, list[float]]]:
        """(task id, rewards of its samples) in task order; a failed episode's reward counts as 0.

        Samples of one task are consecutive (EpisodeRunner.run_batch keeps task order)."""
        k = self.samples_per_task
        return [
            (self.trajectories[i].task_id, [t.reward or 0.0 for t in self.trajectories[i : i + k]])
            for i in range(0, len(self.trajectories), k)
        ]

    def pass_at(self, k: int) -> float:
        """Mean over tasks of the unbiased pass@k from each task's samples."""
        tasks = self.per_task()
        if not tasks:
            return 0.0
        return sum(pass_at_k(len(r), sum(x >= CORRECT for x in r), k) for _, r in tasks) / len(tasks)

    @property
    def mean_at_k(self) -> float:
        """Mean reward over the k samples of every task, averaged over tasks (partial rewards count)."""
        tasks = self.per_task()
        return sum(sum(r) / len(r) for _, r in tasks) / len(tasks) if tasks else 0.0

    def summary(self) -> dict:
        k = self.samples_per_task
        return {
            "episodes": self.episodes,
            "k": k,
            "pass@1": round(self.pass_at(1), 4) if self.episodes else 0.0,
            f"pass@{k}": round(self.pass_at(k), 4) if self.episodes else 0.0,
            f"mean@{k}": round(self.mean_at_k, 4),
            "accuracy": round(self.accuracy, 4),
            "mean_reward": round(self.mean_reward, 4),
            "tool_call_rate": round(self.tool_call_rate, 4),
            "mean_turns": round(self.mean_turns, 3),
            "statuses": self.statuses,
            "wall_s": round(self.wall_s, 1),
            **{key: round(value, 4) for key, value in agent_metrics(self.trajectories).items()},
        }

    def text(self) -> str:
        statuses = ", ".join(f"{k}={v}" for k, v in sorted(self.statuses.items()))
        k = self.samples_per_task
        at_k = (
            f"pass@1 {self.pass_at(1):.3f} | pass@{k} {self.pass_at(k):.3f} | mean@{k} {self.mean_at_k:.3f} | "
            if k > 1 and self.episodes
            else ""
        )
        per_agent = agent_metrics(self.trajectories)
        agents = "".join(
            f" | {key.split('/')[1]}: tool calls {value:.2f}"
            for key, value in per_agent.items()
            if key.endswith("/tool_calls_mean")
        )
        return (
            f"{at_k}episodes {self.episodes} | accuracy {self.accuracy:.3f} | mean reward {self.mean_reward:.3f} | "
            f"tool-call rate {self.tool_call_rate:.3f} | mean turns {self.mean_turns:.2f} | "
            f"statuses: {statuses}{agents} | {self.wall_s:.1f}s"
        )

    def write_jsonl(self, path: str | Path, extra: dict | None = None, append: bool = False) -> Path:
        """Trajectories with their tokens, one per line; `extra` keys (checkpoint, seed) go into each."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a" if append else "w") as f:
            for traj in self.trajectories:
                f.write(json.dumps({**traj.to_dict(), **(extra or {})}, default=str) + "\n")
        return path


async def evaluate_held_out(
    runner: EpisodeRunner,
    router: PolicyRouter,
    tasks: list[Task],
    held: HeldOut,
    show_progress: bool = True,
    description: str = "eval",
) -> EvalReport:
    """The held-out figure of a run: every task `held.k` times under each of `held.seeds`, at the
    held-out temperature and turn limit; one report over every seed's episodes (its pass@k is
    the mean over seeds and tasks)."""
    held_runner = runner.with_settings(held.rollout(runner.settings))
    started, trajectories, seeds = time.perf_counter(), [], []
    try:
        for seed in held.seeds:
            name = description if len(held.seeds) == 1 else f"{description} seed {seed}"
            report = await evaluate(
                held_runner, router, tasks, name, show_progress, samples_per_task=held.k, seed=seed
            )
            trajectories += report.trajectories
            seeds += [seed] * len(report.trajectories)
    finally:
        if held_runner is not runner:
            held_runner.close()  # its rollout worker processes, if any
    return EvalReport.of(trajectories, time.perf_counter() - started, held.k, seeds)


async def evaluate(
    runner: EpisodeRunner,
    router: PolicyRouter,
    tasks: list[Task],
    description: str = "eval",
    show_progress: bool = True,
    samples_per_task: int = 1,
    seed: int | None = None,
) -> EvalReport:
    """Every task `samples_per_task` times; with a `seed`, each sample draws from its own fixed seed."""
    started = time.perf_counter()
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("correct {task.fields[correct]}"),
        TimeElapsedColumn(),
        disable=not show_progress,
        transient=False,
    ) as progress:
        bar = progress.add_task(description, total=len(tasks) * samples_per_task, correct=0)
        correct = 0

        def done(traj: Trajectory) -> None:
            nonlocal correct
            correct += (traj.reward or 0.0) >= CORRECT
            progress.update(bar, advance=1, correct=correct)

        trajectories = await runner.run_batch(
            router, tasks, samples_per_task=samples_per_task, on_done=done, seed=seed
        )
    return EvalReport.of(trajectories, time.perf_counter() - started, samples_per_task)
