"""A batch of episodes: every task some number of times, in this process or in worker processes."""

from __future__ import annotations

import asyncio

from aworld_train.rollout.episodes.driver import AgentDriver, Reward
from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.runtime import RolloutRuntime
from aworld_train.rollout.episodes.trajectory import Task, Trajectory
from aworld_train.rollout.episodes.workers import run_in_workers
from aworld_train.rollout.policies.client import derive_seed


async def run_episodes(
    agent: AgentDriver,
    tasks: list[Task],
    runtime: RolloutRuntime,
    reward: Reward | None = None,
    *,
    samples_per_task: int = 1,
    on_done=None,
    seed: int | None = None,
    limit: asyncio.Semaphore | None = None,
) -> list[Trajectory]:
    """Every task `samples_per_task` times, at most `rollout.concurrency` at once (or as `limit`,
    shared with other batches, allows), in task order.

    With a `seed`, sample k of a task draws from its own seed (seed, task id, k), so a run
    repeats whatever order episodes finish in and whatever batch their calls share.
    With `rollout.workers` > 1 the episodes run in that many worker processes (workers.py).
    """
    if runtime.settings.workers > 1:
        return await run_in_workers(
            agent, tasks, runtime, reward, samples_per_task=samples_per_task, on_done=on_done, seed=seed
        )
    limit = limit or asyncio.Semaphore(runtime.settings.concurrency)
    jobs = [(task, k) for task in tasks for k in range(samples_per_task)]

    async def one(task: Task, k: int) -> Trajectory:
        own = None if seed is None else derive_seed(seed, task.id, k)
        async with limit:
            traj = await Episode(agent, task, runtime, reward, seed=own).run()
        if on_done is not None:
            on_done(traj)
        return traj

    return list(await asyncio.gather(*(one(t, k) for t, k in jobs)))
