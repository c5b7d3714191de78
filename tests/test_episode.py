"""Episodes of a real AWorld agent against real MCP servers over HTTP, with a scripted policy."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aworld_train.aworld.agent_spec import AgentSpec
from aworld_train.env.launcher import free_port, port_open
from aworld_train.inputs.reward import RewardFunction
from aworld_train.rollout.episodes.batch import run_episodes
from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.policies.client import ScriptedPolicy

REWARD = RewardFunction.load("aworld_train.rewards.calculator:exact_answer")


def call(name: str, args: str = "{}") -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def sampled_tokens(traj) -> list[int]:
    return [t for s in traj.segments for t, m in zip(s.response_ids, s.response_mask, strict=True) if m]


@pytest.fixture
def plain_spec(calculator_spec) -> AgentSpec:
    return calculator_spec.model_copy(update={"few_shot": []})


async def test_tool_call_result_and_reward(tokenizer, im_end, plain_spec, make_runtime):
    policy = ScriptedPolicy(
        tokenizer, [call("calculate", '{"expression": "37 * 48"}'), "The answer is 1776."], im_end
    )
    traj = await Episode(
        plain_spec, Task("t", ["What is 37 * 48?"], ground_truth=1776), make_runtime(policy), REWARD
    ).run()
    assert traj.status == "ok", traj.error
    assert traj.reward == 1.0 and traj.final_answer == "The answer is 1776."
    assert [(c.name, c.arguments, c.result, c.error) for c in traj.tool_calls] == [
        ("calculate", {"expression": "37 * 48"}, "1776", False)
    ]
    seg = traj.segments[0]
    assert len(traj.segments) == 1 and traj.num_turns == 2
    assert sampled_tokens(traj) == [t for g in policy.generations for t in g.token_ids]
    # the tool result is in the ledger, with mask 0, between the two sampled turns
    first = len(policy.generations[0].token_ids)
    second_start = policy.prompts[1][len(seg.prompt_ids) :]
    tool_part = tokenizer.decode(second_start[first:])
    assert "<tool_response>\n1776\n</tool_response>" in tool_part
    assert seg.response_mask[first : first + len(second_start) - first] == [0] * (len(second_start) - first)
    assert policy.prompts[1] == seg.ids[: len(policy.prompts[1])]


async def test_tool_error_from_the_server_is_recorded_and_the_episode_goes_on(
    tokenizer, im_end, plain_spec, make_runtime
):
    policy = ScriptedPolicy(
        tokenizer, [call("calculate", '{"expression": "__import__(\\"os\\")"}'), "I cannot."], im_end
    )
    traj = await Episode(plain_spec, Task("t", ["x"], ground_truth=1), make_runtime(policy), REWARD).run()
    assert traj.status == "ok"
    assert traj.tool_calls[0].error and "not allowed" in traj.tool_calls[0].result
    assert traj.reward == 0.0


def _script_for_isolation(tokenizer):
    def step(prompt_ids: list[int]) -> str:
        text = tokenizer.decode(prompt_ids)
        expression = re.findall(r"What is ([^?]+)\?", text)[-1]
        results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", text)
        if not results:
            return call("calculate", json.dumps({"expression": expression}))
        if len(results) == 1:
            return call("last_result")
        return f"The answer is {results[-1]}."

    return step


async def test_64_concurrent_episodes_do_not_cross_talk(tokenizer, im_end, plain_spec, make_runtime):
    """Each episode computes its own product, then asks the server for its last result:
    the server keys that state by the episode header, so any leak shows as a wrong answer."""
    policy = ScriptedPolicy(tokenizer, _script_for_isolation(tokenizer), im_end, latency_s=0.01)
    tasks = [Task(str(i), [f"What is {i} * 7?"], ground_truth=i * 7) for i in range(64)]
    trajs = await run_episodes(plain_spec, tasks, make_runtime(policy, concurrency=64), REWARD)
    assert [t.status for t in trajs] == ["ok"] * 64
    assert [t.reward for t in trajs] == [1.0] * 64
    for i, traj in enumerate(trajs):
        assert traj.task_id == str(i)
        assert [c.result for c in traj.tool_calls] == [str(i * 7)] * 2
    assert len({t.episode_id for t in trajs}) == 64


@pytest.fixture
def slow_server():
    port = free_port()
    script = Path(__file__).with_name("slow_mcp_server.py")
    process = subprocess.Popen(
        [sys.executable, str(script), str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    for _ in range(300):
        if port_open("127.0.0.1", port):
            break
        assert process.poll() is None, "slow server died at start"
        import time

        time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp", process
    process.kill()
    process.wait()


def slow_spec(url: str) -> AgentSpec:
    conf = {"type": "streamable-http", "url": url, "timeout": 60, "sse_read_timeout": 60}
    return AgentSpec(
        name="slow_agent",
        system_prompt="Use tools.",
        mcp_config={"mcpServers": {"slow": conf}},
        mcp_servers=["slow"],
    )


async def test_hanging_tool_ends_in_tool_timeout(tokenizer, im_end, slow_server, make_runtime):
    url, _ = slow_server
    policy = ScriptedPolicy(tokenizer, [call("slow", '{"seconds": 60}')], im_end)
    runtime = make_runtime(policy, tool_timeout_s=2, episode_timeout_s=30)
    traj = await Episode(slow_spec(url), Task("t", ["go"], ground_truth=1), runtime, REWARD).run()
    assert traj.status == "tool_timeout" and "2s" in traj.error
    assert traj.reward is None and not traj.trainable()
    assert sampled_tokens(traj) == policy.generations[0].token_ids  # nothing invented after the call
    assert traj.timings["total_s"] < 20


async def test_server_killed_mid_episode_ends_in_tool_server_down(
    tokenizer, im_end, slow_server, make_runtime
):
    url, process = slow_server
    policy = ScriptedPolicy(tokenizer, [call("crash")], im_end)
    runtime = make_runtime(policy, tool_timeout_s=3, episode_timeout_s=30)
    traj = await Episode(slow_spec(url), Task("t", ["go"], ground_truth=1), runtime, REWARD).run()
    assert process.wait(timeout=10) != 0
    assert traj.status == "tool_server_down" and "slow" in traj.error
    assert not traj.trainable()
    assert sampled_tokens(traj) == policy.generations[0].token_ids


async def test_episode_timeout(tokenizer, im_end, slow_server, make_runtime):
    url, _ = slow_server
    policy = ScriptedPolicy(tokenizer, [call("slow", '{"seconds": 60}')], im_end)
    runtime = make_runtime(policy, tool_timeout_s=60, episode_timeout_s=3)
    traj = await Episode(slow_spec(url), Task("t", ["go"], ground_truth=1), runtime, REWARD).run()
    assert traj.status == "timeout" and not traj.trainable()
    assert "episode_timeout_s=3 of agent and tool time" in traj.error


async def test_time_waiting_for_the_policy_is_not_the_agents(tokenizer, im_end, plain_spec, make_runtime):
    """Many episodes queue for one policy: that wait must not time the agent out; only the
    wall-clock limit counts it."""
    script = [call("calculate", '{"expression": "37 * 48"}'), "The answer is 1776."]
    # two policy calls of 6s each: 12s of policy time against a 10s agent limit
    slow_policy = ScriptedPolicy(tokenizer, script, im_end, latency_s=6.0)
    runtime = make_runtime(slow_policy, episode_timeout_s=10.0)
    task = Task("t", ["What is 37 * 48?"], ground_truth=1776)
    traj = await Episode(plain_spec, task, runtime, REWARD).run()
    assert traj.status == "ok", traj.error
    assert traj.timings["policy_s"] >= 12.0 and traj.timings["agent_s"] < 10.0
    assert traj.timings["total_s"] >= traj.timings["policy_s"] + traj.timings["agent_s"] - 0.01

    walled = ScriptedPolicy(tokenizer, script, im_end, latency_s=5.0)
    runtime = make_runtime(walled, episode_timeout_s=30.0, episode_wall_timeout_s=4.0)
    traj = await Episode(plain_spec, task, runtime, REWARD).run()
    assert traj.status == "timeout" and "episode_wall_timeout_s=4 passed" in traj.error
    assert traj.timings["total_s"] < 15.0


async def test_malformed_calls_and_failures_leave_the_batch_intact(
    tokenizer, im_end, plain_spec, make_runtime
):
    def step(prompt_ids):
        text = tokenizer.decode(prompt_ids)
        question = re.findall(r"What is ([^?]+)\?", text)[-1]
        if question.startswith("bad"):
            return '<tool_call>\n{"name": "calculate", "arguments": {"expression": \n</tool_call>'
        results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", text)
        return (
            f"The answer is {results[-1]}."
            if results
            else call("calculate", json.dumps({"expression": question}))
        )

    policy = ScriptedPolicy(tokenizer, step, im_end)
    tasks = [
        Task(str(i), [f"What is {'bad' if i % 2 else ''}{i} + 1?"], ground_truth=i + 1) for i in range(8)
    ]
    trajs = await run_episodes(plain_spec, tasks, make_runtime(policy), REWARD)
    assert [t.status for t in trajs] == ["ok", "malformed_tool_call"] * 4
    for traj in trajs[1::2]:
        assert (
            traj.reward == 0.0
            and traj.tool_calls == []
            and "tool call" in traj.error.lower()
            or "expecting" in traj.error.lower()
        )
        assert not traj.trainable() and traj.trainable(train_on_malformed=True)
        assert tokenizer.decode(sampled_tokens(traj)).startswith("<tool_call>")
    assert [t.reward for t in trajs[::2]] == [1.0] * 4


async def test_max_turns_stops_the_agent(tokenizer, im_end, plain_spec, make_runtime):
    policy = ScriptedPolicy(tokenizer, lambda ids: call("calculate", '{"expression": "1 + 1"}'), im_end)
    traj = await Episode(
        plain_spec,
        Task("t", ["What is 1 + 1?"], ground_truth=2),
        make_runtime(policy, max_assistant_turns=2),
        REWARD,
    ).run()
    assert traj.status == "max_turns"
    assert traj.num_turns == 2 and len(policy.generations) == 2
    assert traj.trainable()


async def test_several_user_turns_share_one_ledger(tokenizer, im_end, plain_spec, make_runtime):
    """Turn k+1 is given after the agent finishes turn k, in the same ledger: one segment."""
    script = [
        call("calculate", '{"expression": "2 + 3"}'),
        "It is 5.",
        call("calculate", '{"expression": "5 * 4"}'),
        "The answer is 20.",
    ]
    policy = ScriptedPolicy(tokenizer, script, im_end)
    task = Task("t", ["What is 2 + 3?", "Now multiply that by 4."], ground_truth=20)
    traj = await Episode(plain_spec, task, make_runtime(policy), REWARD).run()
    assert traj.status == "ok" and traj.reward == 1.0, traj.error
    assert len(traj.segments) == 1 and traj.num_turns == 4
    assert [c.result for c in traj.tool_calls] == ["5", "20"]
    seg = traj.segments[0]
    for prompt in policy.prompts:
        assert seg.ids[: len(prompt)] == prompt
    text = tokenizer.decode(policy.prompts[2])
    assert text.index("What is 2 + 3?") < text.index("It is 5.") < text.index("Now multiply that by 4.")
    # the agent's history lives only as long as its episode
    from aworld.memory.main import MemoryFactory

    assert not [
        i for i in MemoryFactory.instance().memory_store.memory_items if i.session_id == traj.episode_id
    ]
    assert sampled_tokens(traj) == [t for g in policy.generations for t in g.token_ids]


async def test_a_policy_failure_ends_the_episode_with_its_cause(tokenizer, im_end, plain_spec, make_runtime):
    def broken(prompt_ids):
        raise RuntimeError("inference server went away")

    policy = ScriptedPolicy(tokenizer, broken, im_end)
    traj = await Episode(
        plain_spec, Task("t", ["What is 1 + 1?"], ground_truth=2), make_runtime(policy), REWARD
    ).run()
    assert traj.status == "error" and "inference server went away" in traj.error
    assert not traj.trainable() and traj.timings["total_s"] < 10


async def test_a_rows_system_message_is_the_episodes_system_prompt(
    tokenizer, im_end, plain_spec, make_runtime
):
    """Datasets that carry a system message per row (verl's chat prompts) get it in the prompt,
    in place of the agent's own."""
    policy = ScriptedPolicy(tokenizer, ["4"], im_end)
    task = Task("s", ["What is 2 + 2?"], ground_truth=4, system="You are TERSE-BOT; reply with digits.")
    traj = await Episode(plain_spec, task, make_runtime(policy), REWARD).run()
    assert traj.status == "ok", traj.error
    first_prompt = tokenizer.decode(policy.prompts[0])
    assert "You are TERSE-BOT; reply with digits." in first_prompt
    assert plain_spec.system_prompt.strip()[:40] not in first_prompt


async def test_a_server_down_from_the_start_is_never_an_ok_episode(tokenizer, im_end, make_runtime):
    """AWorld gives an agent whose server does not answer no tools at all; its calls come
    back "can not find ... tool". Such an episode must not be trained on as ok."""
    url = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there
    spec = slow_spec(url)
    policy = ScriptedPolicy(tokenizer, [call("slow", '{"seconds": 0}'), "done"], im_end)
    traj = await Episode(spec, Task("t", ["go"], ground_truth=1), make_runtime(policy), REWARD).run()
    assert traj.status == "tool_server_down" and not traj.trainable()
    assert "'slow'" in traj.error and url in traj.error
    assert policy.prompts == []  # ended before the policy was asked anything
