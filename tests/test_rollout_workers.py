"""`rollout.workers`: episodes in worker processes, one policy in the main process, same trajectories."""

from __future__ import annotations

import json
import re

import pytest

from aworld_train.inputs.reward import RewardFunction
from aworld_train.rollout.episodes.batch import run_episodes
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.policies.client import ScriptedPolicy

REWARD = RewardFunction.load("aworld_train.rewards.calculator:exact_answer")


def calculator_script(tokenizer):
    def step(prompt_ids: list[int]) -> str:
        text = tokenizer.decode(prompt_ids)
        if "boom" in text:
            raise ValueError("no model for this one")
        tail = text[text.rindex("What is") :]
        results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", tail)
        if results:
            return f"The answer is {results[-1]}."
        expression = re.findall(r"What is ([^?]+)\?", tail)[0]
        call = json.dumps({"name": "calculate", "arguments": {"expression": expression}})
        return f"<tool_call>\n{call}\n</tool_call>"

    return step


def view(traj) -> tuple:
    return (
        traj.task_id,
        traj.status,
        traj.reward,
        traj.final_answer,
        [(c.name, c.arguments, c.result) for c in traj.tool_calls],
        [
            (s.prompt_ids, s.response_ids, s.response_mask, s.response_logprobs, s.turn_starts)
            for s in traj.segments
        ],
    )


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    return [Task(f"t{i}", [f"What is {i} * 7?"], ground_truth=i * 7) for i in range(3)] + [
        Task("boom", ["What is boom?"], ground_truth=0)
    ]


async def test_two_workers_give_the_trajectories_of_one_process(
    tokenizer, im_end, calculator_spec, make_runtime, tasks
):
    spec = calculator_spec.model_copy(update={"few_shot": []})
    local = await run_episodes(
        spec,
        tasks,
        make_runtime(ScriptedPolicy(tokenizer, calculator_script(tokenizer), im_end)),
        REWARD,
        samples_per_task=2,
    )
    policy = ScriptedPolicy(tokenizer, calculator_script(tokenizer), im_end)
    runtime = make_runtime(policy, workers=2, concurrency=4)
    seen = []
    try:
        remote = await run_episodes(spec, tasks, runtime, REWARD, samples_per_task=2, on_done=seen.append)
        pool = runtime.pool
        assert pool is not None and pool.size == 2
        # a second batch reuses the same processes
        again = await run_episodes(spec, tasks[:1], runtime, REWARD, samples_per_task=1)
        assert runtime.pool is pool and [t.status for t in again] == ["ok"]
    finally:
        runtime.close()
    assert runtime.pool is None and not any(p.is_alive() for p in pool.processes)
    # a policy error in the main process ends that episode as an error, not the batch
    assert [t.status for t in remote] == ["ok"] * 6 + ["error"] * 2, [t.error for t in remote]
    assert all("no model for this one" in t.error for t in remote[6:])
    # same trajectories, token for token, in task order; rewards scored in the main process
    assert [view(t) for t in remote] == [view(t) for t in local]
    assert [t.reward for t in remote[:6]] == [1.0] * 6
    assert sorted(t.episode_id for t in seen) == sorted(t.episode_id for t in remote)
    # every policy call was served here: 2 per ok episode of the first batch, 2 for the second
    assert len(policy.generations) == 2 * 6 + 2


def test_workers_start_without_rerunning_the_parents_main():
    """A script without a main guard must not run again in each worker (spawn re-imports __main__)."""
    import sys
    from multiprocessing import spawn

    from aworld_train.rollout.episodes.workers import _main_left_alone

    main = sys.modules["__main__"]
    before = (getattr(main, "__spec__", None), getattr(main, "__file__", None))
    with _main_left_alone():
        data = spawn.get_preparation_data("worker")
        assert "init_main_from_path" not in data and "init_main_from_name" not in data
    assert (getattr(main, "__spec__", None), getattr(main, "__file__", None)) == before
