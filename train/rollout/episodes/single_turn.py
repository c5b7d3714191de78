"""Single-turn rollouts without an agent or tools: prompt ids in, trajectories out.

For learning tests and benchmarks that compare the GRPO update with other
trainers on a task every trainer can run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

from aworld_train.rollout.episodes.trajectory import Trajectory
from aworld_train.rollout.policies.client import Generation, PolicyClient, SamplingParams, derive_seed
from aworld_train.rollout.tokens.ledger import Segment


async def sample_groups(
    policy: PolicyClient,
    prompts: list[list[int]],
    group_size: int,
    sampling: SamplingParams,
    reward: Callable[[list[int], Generation], float],
) -> list[Trajectory]:
    """`group_size` samples of every prompt, scored by `reward(prompt_ids, generation)`, in prompt order."""
    jobs = [(i, p) for i, p in enumerate(prompts) for _ in range(group_size)]
    # a seed fixes one request's draws: each sample of a seeded group gets its own
    per_job = [
        sampling if sampling.seed is None else replace(sampling, seed=derive_seed(sampling.seed, j))
        for j in range(len(jobs))
    ]
    gens = await asyncio.gather(*(policy.generate(p, s) for (_, p), s in zip(jobs, per_job, strict=True)))
    trajs = []
    for (i, prompt), gen in zip(jobs, gens, strict=True):
        seg = Segment(
            list(prompt), list(gen.token_ids), [1] * len(gen.token_ids), list(gen.logprobs), [len(prompt)]
        )
        trajs.append(
            Trajectory(
                episode_id=f"{i}-{len(trajs)}",
                task_id=str(i),
                segments=[seg],
                num_turns=1,
                reward=reward(prompt, gen),
            )
        )
    return trajs
