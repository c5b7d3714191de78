"""One agent's episodes, however they are driven: every engine, `eval` and the rollout workers run
them through an `EpisodeRunner`, built once per process from the agent, the tokenizer, the rollout
settings and the reward; the policy comes with each call (a verl or AReaL request, the local model,
a completions endpoint)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aworld_train.models import stop_token_ids
from aworld_train.rollout.batch import run_episodes
from aworld_train.rollout.chat import renderer_for
from aworld_train.rollout.driver import AgentDriver, Reward
from aworld_train.rollout.episode import Episode
from aworld_train.rollout.policy import PolicyClient
from aworld_train.rollout.runtime import RolloutRuntime
from aworld_train.rollout.settings import RolloutConfig
from aworld_train.rollout.trajectory import Task, Trajectory


class EpisodeRunner:
    def __init__(
        self, agent: AgentDriver, tokenizer, settings: RolloutConfig, reward: Reward | None = None
    ) -> None:
        self.agent = agent
        self.tokenizer = tokenizer
        self.settings = settings
        self.reward = reward
        self.renderer = renderer_for(tokenizer, settings)
        self.stop_token_ids = stop_token_ids(tokenizer)
        self._batches: RolloutRuntime | None = None  # holds the worker processes of rollout.workers > 1

    def runtime(self, policy: PolicyClient) -> RolloutRuntime:
        return RolloutRuntime(policy, self.renderer, self.stop_token_ids, self.settings)

    async def run(
        self, policy: PolicyClient, task: Task, episode_id: str | None = None, seed: int | None = None
    ) -> Trajectory:
        """One episode of `task`, scored."""
        return await Episode(self.agent, task, self.runtime(policy), self.reward, episode_id, seed).run()

    async def run_batch(
        self,
        policy: PolicyClient,
        tasks: list[Task],
        samples_per_task: int = 1,
        on_done: Callable[[Trajectory], None] | None = None,
        seed: int | None = None,
        limit: asyncio.Semaphore | None = None,
    ) -> list[Trajectory]:
        """Every task `samples_per_task` times, scored, in task order (`batch.run_episodes`)."""
        if self._batches is None or self._batches.policy is not policy:
            self.close()
            self._batches = self.runtime(policy)
        return await run_episodes(
            self.agent,
            tasks,
            self._batches,
            self.reward,
            samples_per_task,
            on_done=on_done,
            seed=seed,
            limit=limit,
        )

    def close(self) -> None:
        """End the worker processes, if any; a later batch starts new ones."""
        if self._batches is not None:
            self._batches.close()
