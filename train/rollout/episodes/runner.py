"""One agent's episodes, however they are driven: every engine, `eval` and the rollout workers run
them through an `EpisodeRunner`, built once per process from the agent, the tokenizer, the rollout
settings and the reward; the policies' router comes with each call (a router of one: a verl or AReaL
request, a completions endpoint; the local run's, built once at its start)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from aworld_train.rollout.episodes.batch import run_episodes
from aworld_train.rollout.episodes.driver import AgentDriver, Reward
from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.runtime import RolloutRuntime
from aworld_train.rollout.episodes.settings import RolloutSettings
from aworld_train.rollout.episodes.trajectory import Task, Trajectory
from aworld_train.rollout.policies.router import PolicyRouter
from aworld_train.rollout.tokens.templates.renderer import renderer_for
from aworld_train.rollout.tokens.turns.stops import stop_token_ids

if TYPE_CHECKING:
    from aworld_train.rollout.policies.local import LocalPolicy

logger = logging.getLogger(__name__)


class EpisodeRunner:
    def __init__(
        self, agent: AgentDriver, tokenizer, settings: RolloutSettings, reward: Reward | None = None
    ) -> None:
        self.agent = agent
        self.tokenizer = tokenizer
        self.settings = settings
        self.reward = reward
        self.renderer = renderer_for(tokenizer, settings)
        self.stop_token_ids = stop_token_ids(tokenizer)
        self._batches: RolloutRuntime | None = None  # holds the worker processes of rollout.workers > 1
        self._served: PolicyRouter | None = None  # what `_batches` serves

    def with_settings(self, settings: RolloutSettings) -> EpisodeRunner:
        """This runner where `settings` are its own, else a runner of the same agent, tokenizer and
        reward under `settings` (held-out episodes at their own temperature and turn limit)."""
        if settings == self.settings:
            return self
        return EpisodeRunner(self.agent, self.tokenizer, settings, self.reward)

    def runtime(self, router: PolicyRouter) -> RolloutRuntime:
        """What the episodes share; the router's policies serve its agents' calls."""
        return RolloutRuntime(router, self.renderer, self.stop_token_ids, self.settings)

    async def run(
        self, router: PolicyRouter, task: Task, episode_id: str | None = None, seed: int | None = None
    ) -> Trajectory:
        """One episode of `task`, scored."""
        return await Episode(self.agent, task, self.runtime(router), self.reward, episode_id, seed).run()

    async def run_batch(
        self,
        router: PolicyRouter,
        tasks: list[Task],
        samples_per_task: int = 1,
        on_done: Callable[[Trajectory], None] | None = None,
        *,
        seed: int | None = None,
        limit: asyncio.Semaphore | None = None,
    ) -> list[Trajectory]:
        """Every task `samples_per_task` times, scored, in task order (`batch.run_episodes`)."""
        if self._batches is None or self._served is not router:
            self._close_batches()
            self._batches, self._served = self.runtime(router), router
        return await run_episodes(
            self.agent,
            tasks,
            self._batches,
            self.reward,
            samples_per_task=samples_per_task,
            on_done=on_done,
            seed=seed,
            limit=limit,
        )

    def _close_batches(self) -> None:
        if self._batches is not None:
            self._batches.close()

    def close(self) -> None:
        """End the worker processes and the agent's own processes (an agent through the gateway),
        if any; a later batch starts new ones."""
        self._close_batches()
        stop_processes = getattr(self.agent, "stop_processes", None)
        if stop_processes is not None:
            stop_processes()


def local_runner(
    agent: AgentDriver,
    model_ref: str,
    settings: RolloutSettings,
    reward: Reward | None = None,
    *,
    model=None,
    tokenizer=None,
) -> tuple[EpisodeRunner, LocalPolicy]:
    """The agent's episode runner and a local transformers policy of `model_ref` (loaded unless
    given), after its chat template is checked."""
    from aworld_train.rollout.episodes.template_check import require_usable_template, template_report
    from aworld_train.rollout.policies.local import LocalPolicy
    from aworld_train.rollout.policies.models import load_model, load_tokenizer

    tokenizer = tokenizer or load_tokenizer(model_ref)
    report = template_report(tokenizer, settings)
    require_usable_template(report, model_ref)
    logger.info("chat template: %s", report.line())
    model = model or load_model(model_ref)
    runner = EpisodeRunner(agent, tokenizer, settings, reward)
    policy = LocalPolicy(
        model,
        tokenizer,
        runner.stop_token_ids,
        max_batch_size=settings.max_batch_size,
        prefix_cache_mb=settings.prefix_cache_mb,
    )
    return runner, policy
