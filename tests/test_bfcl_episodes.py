"""Real AWorld episodes on BFCL entries: a scripted policy replays each entry's possible answer
through the agent's MCP tools; the official checker and bfcl-eval's executor judge the result."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("bfcl_eval", reason="bfcl-eval is installed by `make setup` (pip install --no-deps)")

from aworld_train.env.bfcl import catalog  # noqa: E402
from aworld_train.inputs.reward import RewardFunction  # noqa: E402
from aworld_train.rewards.bfcl_replay import bfcl_results, parse_call  # noqa: E402
from aworld_train.rollout.episodes.batch import run_episodes  # noqa: E402
from aworld_train.rollout.episodes.episode import Episode  # noqa: E402
from aworld_train.rollout.episodes.trajectory import Task  # noqa: E402
from aworld_train.rollout.policies.client import ScriptedPolicy  # noqa: E402

REWARD = RewardFunction.load("aworld_train.rewards.bfcl:checker")
MISS = "multi_turn_miss_func_0"


@pytest.fixture(scope="module")
def bfcl_server():
    from aworld_train.env.launcher import start_server

    server = start_server("bfcl")
    yield server
    server.stop()


@pytest.fixture
def bfcl_spec(bfcl_server):
    from aworld_train.agents.bfcl import build_agent
    from aworld_train.aworld.specs import load_agent_spec

    return load_agent_spec(build_agent(url=bfcl_server.url))


def task(entry_id: str) -> Task:
    truth = catalog.possible_answer(entry_id)
    row = {
        "id": entry_id,
        "prompt": catalog.user_turns(catalog.entry(entry_id)),
        "ground_truth": json.dumps(truth),
    }
    return Task(entry_id, row["prompt"], ground_truth=row["ground_truth"], row=row)


def replaying_policy(tokenizer, im_end: int, entry_ids: list[str]) -> ScriptedPolicy:
    """Finds the entry by its first user message, the turn by the user messages so far and the
    step by the assistant messages since: then makes the possible answer's next call, or ends the turn."""
    firsts = {catalog.user_turns(catalog.entry(e))[0]: e for e in entry_ids}
    assert len(firsts) == len(entry_ids), "entries must differ in their first user turn"

    def step(prompt_ids: list[int]) -> str:
        text = tokenizer.decode(prompt_ids)
        entry_id = next(e for first, e in firsts.items() if first in text)
        turn = text.count("<|im_start|>user") - 1
        step_index = text.rsplit("<|im_start|>user", 1)[1].count("<|im_start|>assistant") - 1
        calls = catalog.possible_answer(entry_id)[turn]
        if step_index >= len(calls):
            return "Done."
        name, arguments = parse_call(calls[step_index], catalog.entry(entry_id))
        return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"

    return ScriptedPolicy(tokenizer, step, im_end, latency_s=0.005)


def distinct_entries(count: int) -> list[str]:
    """Entries of all four categories whose first user turns differ."""
    chosen, seen = [], set()
    for index in range(200):
        for category in catalog.CATEGORIES:
            entry_id = f"multi_turn_{category}_{index}"
            first = catalog.user_turns(catalog.entry(entry_id))[0]
            if first not in seen and len(chosen) < count:
                seen.add(first)
                chosen.append(entry_id)
    return chosen


async def test_held_back_function_reaches_the_agent_at_its_turn(tokenizer, im_end, bfcl_spec, make_runtime):
    policy = replaying_policy(tokenizer, im_end, [MISS])
    runtime = make_runtime(policy, tool_block="auto", max_assistant_turns=8, max_total_tokens=32768)
    traj = await Episode(bfcl_spec, task(MISS), runtime, REWARD).run()
    assert traj.status == "ok" and traj.reward == 1.0, (traj.error, traj.reward_extras)
    sort_call = next(c for c in traj.tool_calls if c.name == "sort")
    assert sort_call.user_turn == 3 and not sort_call.error
    turn_of_prompt = [tokenizer.decode(p).count("<|im_start|>user") - 1 for p in policy.prompts]
    offered = [('"name": "sort"' in tokenizer.decode(p).split("<|im_start|>user")[0]) for p in policy.prompts]
    assert offered == [t >= 3 for t in turn_of_prompt]
    assert len(traj.segments) == 2  # the tool list changed: the ledger started a new segment


async def test_50_concurrent_episodes_on_different_entries_keep_their_state(
    tokenizer, im_end, bfcl_spec, make_runtime
):
    entry_ids = distinct_entries(50)
    policy = replaying_policy(tokenizer, im_end, entry_ids)
    runtime = make_runtime(
        policy, concurrency=50, max_assistant_turns=12, episode_timeout_s=600, tool_timeout_s=120
    )
    trajs = await run_episodes(bfcl_spec, [task(e) for e in entry_ids], runtime, REWARD)
    assert [t.status for t in trajs] == ["ok"] * 50, [t.error for t in trajs if t.status != "ok"]
    assert [t.reward for t in trajs] == [1.0] * 50, [
        (t.task_id, t.reward_extras) for t in trajs if t.reward != 1
    ]
    for traj in trajs:
        # every result is what the entry's own fresh world gives: nothing leaked between episodes
        truth = catalog.possible_answer(traj.task_id)
        assert [c.result for c in traj.tool_calls] == bfcl_results(traj.task_id, truth), traj.task_id
