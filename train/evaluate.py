"""Evaluation: run the agent over tasks and report accuracy, tool use, turns and failures."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from aworld_train.aworld.agent_spec import AgentSpec
from aworld_train.reward import RewardFunction
from aworld_train.rollout.episode import RolloutRuntime, run_episodes
from aworld_train.rollout.trajectory import Task, Trajectory

CORRECT = 0.999  # a reward at or above this counts as a correct answer


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

    @classmethod
    def of(cls, trajectories: list[Trajectory], wall_s: float) -> EvalReport:
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
        )

    def summary(self) -> dict:
        return {
            "episodes": self.episodes,
            "accuracy": round(self.accuracy, 4),
            "mean_reward": round(self.mean_reward, 4),
            "tool_call_rate": round(self.tool_call_rate, 4),
            "mean_turns": round(self.mean_turns, 3),
            "statuses": self.statuses,
            "wall_s": round(self.wall_s, 1),
        }

    def text(self) -> str:
        statuses = ", ".join(f"{k}={v}" for k, v in sorted(self.statuses.items()))
        return (
            f"episodes {self.episodes} | accuracy {self.accuracy:.3f} | mean reward {self.mean_reward:.3f} | "
            f"tool-call rate {self.tool_call_rate:.3f} | mean turns {self.mean_turns:.2f} | "
            f"statuses: {statuses} | {self.wall_s:.1f}s"
        )

    def write_jsonl(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as f:
            for traj in self.trajectories:
                f.write(json.dumps(traj.to_dict(), default=str) + "\n")
        return path


async def evaluate(
    spec: AgentSpec,
    tasks: list[Task],
    runtime: RolloutRuntime,
    reward: RewardFunction,
    description: str = "eval",
    show_progress: bool = True,
) -> EvalReport:
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
        bar = progress.add_task(description, total=len(tasks), correct=0)
        correct = 0

        def done(traj: Trajectory) -> None:
            nonlocal correct
            correct += (traj.reward or 0.0) >= CORRECT
            progress.update(bar, advance=1, correct=correct)

        trajectories = await run_episodes(spec, tasks, runtime, reward, samples_per_task=1, on_done=done)
    return EvalReport.of(trajectories, time.perf_counter() - started)
