"""Where a local step's episodes come from: each step's tasks (a seeded shuffle per epoch, so a
resumed run sees the same batches), sampled when the step begins (synchronous), or taken from the
groups a background stream sampled meanwhile (`algorithm.max_staleness` > 0, `async_rollout.py`)."""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING

from aworld_train.engines.local.async_rollout import GroupStream, Taken
from aworld_train.rollout.episodes.trajectory import Task, Trajectory
from aworld_train.rollout.policies.client import derive_seed

if TYPE_CHECKING:
    from aworld_train.engines.local.startup import Parts
    from aworld_train.inputs.config import TrainConfig


def batch_for_step(tasks: list[Task], step: int, batch_size: int, seed: int) -> list[Task]:
    """Deterministic batches: epoch e is a seeded shuffle; a resumed run sees the same batches."""
    out = []
    for slot in range(step * batch_size, (step + 1) * batch_size):
        epoch, index = divmod(slot, len(tasks))
        order = list(range(len(tasks)))
        random.Random(seed * 1_000_003 + epoch).shuffle(order)
        out.append(tasks[order[index]])
    return out


class StepSampler:
    """The episodes of each step: `sample(step)`, and the stream behind it when asynchronous."""

    def __init__(self, cfg: TrainConfig, tasks: list[Task], parts: Parts) -> None:
        self.cfg, self.tasks, self.parts = (
            cfg,
            tasks,
            parts,
        )  # the runner and policy of `parts`, as they are now
        self.stream: GroupStream | None = None

    def step_seed(self, step: int) -> int:
        # each step samples under its own seed: a resumed run draws what the uninterrupted one would
        return derive_seed(self.cfg.trainer.seed, "step", step)

    def sample(self, step: int) -> tuple[list[Trajectory], Taken | None]:
        """The step's trajectories, task by task: sampled now (synchronous), or the groups the
        background stream finished (with those it dropped as stale)."""
        if self.stream is not None:
            taken = self.stream.take()
            return taken.trajectories, taken
        cfg = self.cfg
        tasks = batch_for_step(self.tasks, step, cfg.data.batch_size, cfg.trainer.seed)
        episodes = self.parts.runner.run_batch(
            self.parts.router, tasks, samples_per_task=cfg.algorithm.group_size, seed=self.step_seed(step)
        )
        return asyncio.run(episodes), None

    async def sample_group(self, index: int, limit: asyncio.Semaphore) -> list[Trajectory]:
        """Group `index` of the run's stream: the task the synchronous loop would give that slot
        of its step, sampled under that step's seed."""
        batch = self.cfg.data.batch_size
        step, slot = divmod(index, batch)
        task = batch_for_step(self.tasks, step, batch, self.cfg.trainer.seed)[slot]
        return await self.parts.runner.run_batch(
            self.parts.router, [task], self.cfg.algorithm.group_size, seed=self.step_seed(step), limit=limit
        )

    def start_stream(self, first_step: int) -> None:
        """Sample groups in the background from `first_step` on, while the learner trains."""
        cfg, batch = self.cfg, self.cfg.data.batch_size
        self.stream = GroupStream(
            self.sample_group,
            lambda: self.parts.policy.version,
            batch,
            cfg.algorithm.max_staleness,
            cfg.rollout.concurrency,
            cfg.algorithm.group_size,
            first_index=first_step * batch,
            end_index=cfg.trainer.steps * batch,
        )
        self.stream.start()

    def stop_stream(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None

    def weights_changed(self) -> None:
        if self.stream is not None:
            self.stream.weights_changed()

    def run(self, coroutine):
        """`coroutine` to its end: on the stream's loop while groups are sampled in the background
        (the policy serves that loop alone), else on a loop of its own."""
        return self.stream.run(coroutine) if self.stream is not None else asyncio.run(coroutine)
