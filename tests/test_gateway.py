"""The token-exact OpenAI-compatible gateway: agents in other processes train as in-process ones.

A scripted policy answers; the agents are AWorld's own runner with its stock `openai` provider in a
subprocess, a plain `openai` SDK loop in a subprocess, and the `openai` SDK called from the test.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import httpx
import pytest
from gateway_support import SDKAgent
from openai import AsyncOpenAI, BadRequestError

from aworld_train.agents.calculator import FEW_SHOT, mcp_config
from aworld_train.aworld.specs import load_agent_spec
from aworld_train.inputs.reward import RewardFunction
from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.gateway.process_agent import ProcessAgent
from aworld_train.rollout.gateway.server import gateway
from aworld_train.rollout.policies.client import ScriptedPolicy

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "calculator_gateway"
REWARD = RewardFunction.load("aworld_train.rewards.calculator:exact_answer")
TASK = Task("t1", ["What is 37 * 48?"], ground_truth=1776)


def call(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def calculator_script(prompt_text: str) -> str:
    """Calls the calculator once, then answers with what it returned."""
    if prompt_text.count("<tool_response>") > FEW_SHOT_RESPONSES:
        return "The answer is 1776."
    return call("calculate", {"expression": "37 * 48"})


FEW_SHOT_RESPONSES = sum(m["role"] == "tool" for m in FEW_SHOT)


def process_agent(script: str, url: str) -> ProcessAgent:
    return ProcessAgent(
        name="calculator_agent",
        command=[sys.executable, str(EXAMPLE / script)],
        env={"CALCULATOR_MCP_URL": url},
        mcp_config=mcp_config(url),
        mcp_servers=["calculator"],
        few_shot=FEW_SHOT,
    )


def scripted(tokenizer, im_end) -> ScriptedPolicy:
    return ScriptedPolicy(tokenizer, lambda ids: calculator_script(tokenizer.decode(ids)), im_end)


async def test_an_aworld_agent_in_a_subprocess_yields_the_samples_of_the_same_agent_in_process(
    calculator_server, calculator_spec, tokenizer, im_end, make_runtime
):
    inside = await Episode(calculator_spec, TASK, make_runtime(scripted(tokenizer, im_end)), REWARD).run()
    outside_agent = process_agent("aworld_agent.py", calculator_server.url)
    outside = await Episode(outside_agent, TASK, make_runtime(scripted(tokenizer, im_end)), REWARD).run()
    assert inside.status == outside.status == "ok", (inside.error, outside.error)
    assert outside.reward == 1.0 and outside.final_answer == "The answer is 1776."
    assert [s.to_dict() for s in outside.segments] == [s.to_dict() for s in inside.segments]
    assert [(c.name, c.result) for c in outside.tool_calls] == [("calculate", "1776")]


async def test_a_plain_openai_sdk_loop_in_a_subprocess_yields_the_same_samples(
    calculator_server, calculator_spec, tokenizer, im_end, make_runtime
):
    inside = await Episode(calculator_spec, TASK, make_runtime(scripted(tokenizer, im_end)), REWARD).run()
    outside_agent = process_agent("sdk_agent.py", calculator_server.url)
    outside = await Episode(outside_agent, TASK, make_runtime(scripted(tokenizer, im_end)), REWARD).run()
    assert outside.status == "ok", outside.error
    assert outside.reward == 1.0 and outside.final_answer == "The answer is 1776."
    assert [s.to_dict() for s in outside.segments] == [s.to_dict() for s in inside.segments]


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "Evaluate an arithmetic expression",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]


def sampled(segment) -> list[int]:
    return [t for t, m in zip(segment.response_ids, segment.response_mask, strict=True) if m]


async def test_streaming_and_parallel_tool_calls_through_the_sdk_keep_one_exact_ledger(
    tokenizer, im_end, make_runtime
):
    two_calls = call("calculate", {"expression": "2 + 3"}) + "\n" + call("calculate", {"expression": "4 * 5"})
    policy = ScriptedPolicy(tokenizer, [two_calls, "Both: 5 and 20."], im_end)
    seen: dict = {}

    async def body(client: AsyncOpenAI, text: str, session) -> None:
        messages = [{"role": "system", "content": "You compute."}, {"role": "user", "content": text}]
        stream = await client.chat.completions.create(
            model="m", messages=messages, tools=TOOLS, stream=True, stream_options={"include_usage": True}
        )
        calls: dict[int, dict] = {}
        async for chunk in stream:
            if chunk.usage is not None:
                seen["usage"] = chunk.usage
            for choice in chunk.choices:
                for delta in choice.delta.tool_calls or []:
                    entry = calls.setdefault(delta.index, {"id": delta.id, "name": "", "arguments": ""})
                    entry["name"] += delta.function.name or ""
                    entry["arguments"] += delta.function.arguments or ""
                if choice.finish_reason:
                    seen["finish"] = choice.finish_reason
        seen["calls"] = [calls[i] for i in sorted(calls)]
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": c["arguments"]},
                    }
                    for c in seen["calls"]
                ],
            }
        )
        for c, result in zip(seen["calls"], ("5", "20"), strict=True):
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": result})
        final = await client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        seen["final"] = final.choices[0].message.content

    traj = await Episode(SDKAgent(body), Task("p", ["Add and multiply."]), make_runtime(policy)).run()
    assert traj.status == "ok", traj.error
    assert seen["finish"] == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for c in seen["calls"]] == [
        ("calculate", {"expression": "2 + 3"}),
        ("calculate", {"expression": "4 * 5"}),
    ]
    assert seen["usage"].prompt_tokens == len(policy.prompts[0])
    assert seen["final"] == "Both: 5 and 20." == traj.final_answer
    assert [(c.name, c.result) for c in traj.tool_calls] == [("calculate", "5"), ("calculate", "20")]
    (segment,) = traj.segments
    assert sampled(segment) == [t for g in policy.generations for t in g.token_ids]
    assert segment.ids[: len(policy.prompts[1])] == policy.prompts[1]
    assert traj.history_rewrites == 0


async def test_an_agent_that_edits_its_history_gets_a_new_segment_and_the_metric_counts_it(
    tokenizer, im_end, make_runtime
):
    policy = ScriptedPolicy(tokenizer, ["A long first answer.", "Second answer."], im_end)

    async def body(client: AsyncOpenAI, text: str, session) -> None:
        messages = [{"role": "user", "content": text}]
        first = await client.chat.completions.create(model="m", messages=messages)
        assert first.choices[0].message.content == "A long first answer."
        # the agent summarises its own earlier answer before the next call
        messages += [{"role": "assistant", "content": "(summary)"}, {"role": "user", "content": "Go on."}]
        await client.chat.completions.create(model="m", messages=messages)

    traj = await Episode(SDKAgent(body), Task("e", ["Start."]), make_runtime(policy)).run()
    assert traj.status == "ok", traj.error
    assert len(traj.segments) == 2 and traj.history_rewrites == 1
    # the rewritten history is prompt (not trained) in the new segment; each segment's sampled ids exact
    assert [sampled(s) for s in traj.segments] == [g.token_ids for g in policy.generations]
    assert "(summary)" in tokenizer.decode(traj.segments[1].prompt_ids)

    from aworld_train.engines.local.step_metrics import rollout_metrics

    assert rollout_metrics([traj])["history_rewrites_mean"] == 1


async def test_n_choices_logprobs_stop_and_seed_are_answered_and_the_first_choice_is_recorded(
    tokenizer, im_end, make_runtime
):
    policy = ScriptedPolicy(tokenizer, lambda ids: "The answer is 42. Done.", im_end)
    got: dict = {}

    async def body(client: AsyncOpenAI, text: str, session) -> None:
        got["r"] = await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": text}],
            n=2,
            logprobs=True,
            seed=7,
            stop=[" Done"],
        )

    traj = await Episode(SDKAgent(body), Task("n", ["Answer."]), make_runtime(policy)).run()
    assert traj.status == "ok", traj.error
    response = got["r"]
    assert [c.message.content for c in response.choices] == ["The answer is 42.", "The answer is 42."]
    assert [c.finish_reason for c in response.choices] == ["stop", "stop"]
    (segment,) = traj.segments
    kept = sampled(segment)
    # the ids kept end at the stop string; its logprobs are the policy's, one per id
    assert tokenizer.decode(kept).endswith(" Done") and len(kept) < len(policy.generations[0].token_ids)
    logprobs = response.choices[0].logprobs.content
    assert [lp.logprob for lp in logprobs] == pytest.approx(policy.generations[0].logprobs[: len(kept)])
    assert "".join(lp.token for lp in logprobs) == tokenizer.decode(kept)
    assert len(policy.prompts) == 2  # n=2: two policy calls on one prompt
    assert response.usage.completion_tokens == 2 * len(kept)


async def test_requests_the_gateway_cannot_honour_are_refused_naming_the_field(
    tokenizer, im_end, make_runtime
):
    policy = ScriptedPolicy(tokenizer, lambda ids: "ok", im_end)
    got: dict = {}

    async def body(client: AsyncOpenAI, text: str, session) -> None:
        messages = [{"role": "user", "content": text}]
        with pytest.raises(BadRequestError) as refused:
            await client.chat.completions.create(model="m", messages=messages, logit_bias={"42": 5})
        got["logit_bias"] = refused.value
        with pytest.raises(BadRequestError) as refused:
            await client.chat.completions.create(model="m", messages=messages, top_logprobs=3, logprobs=True)
        got["top_logprobs"] = refused.value
        async with httpx.AsyncClient() as http:
            url = f"{session.base_url}/chat/completions"
            got["no_token"] = await http.post(url, json={"messages": messages})
            got["wrong_token"] = await http.post(
                url, json={"messages": messages}, headers={"Authorization": "Bearer x"}
            )
            got["no_session"] = await http.post(
                url.replace(session.id, "nosuchsession"), json={"messages": messages}
            )
        await client.chat.completions.create(model="m", messages=messages)

    traj = await Episode(SDKAgent(body), Task("r", ["Hi."]), make_runtime(policy)).run()
    assert traj.status == "ok", traj.error
    assert "logit_bias" in str(got["logit_bias"]) and got["logit_bias"].body["param"] == "logit_bias"
    assert "top_logprobs" in str(got["top_logprobs"])
    assert got["no_token"].status_code == got["wrong_token"].status_code == 401
    assert got["no_session"].status_code == 404
    assert len(policy.prompts) == 1  # refused requests never reached the policy


async def test_text_completions_extend_the_ledger_with_the_sampled_ids(tokenizer, im_end, make_runtime):
    policy = ScriptedPolicy(tokenizer, [" four", " six"], im_end)
    got: dict = {}

    async def body(client: AsyncOpenAI, text: str, session) -> None:
        first = await client.completions.create(model="m", prompt="two plus two is", max_tokens=8, logprobs=1)
        got["first"] = first.choices[0].text
        got["logprobs"] = first.choices[0].logprobs.token_logprobs
        prompt = "two plus two is" + first.choices[0].text + ". three plus three is"
        second = await client.completions.create(model="m", prompt=prompt, max_tokens=8)
        got["second"] = second.choices[0].text

    traj = await Episode(SDKAgent(body), Task("c", ["-"]), make_runtime(policy)).run()
    assert traj.status == "ok", traj.error
    assert (got["first"], got["second"]) == (" four", " six")
    assert got["logprobs"] == pytest.approx(policy.generations[0].logprobs)
    (segment,) = traj.segments
    assert sampled(segment) == [t for g in policy.generations for t in g.token_ids]
    assert policy.prompts[1] == segment.ids[: len(policy.prompts[1])]
    assert policy.prompts[1][: len(policy.prompts[0]) + len(policy.generations[0].token_ids)] == (
        policy.prompts[0] + policy.generations[0].token_ids
    )


async def test_a_reported_reward_scores_the_episode_and_a_missing_one_is_a_reward_error(
    tokenizer, im_end, make_runtime
):
    reported = RewardFunction.load("aworld_train.rewards.reported:reported_reward")

    def reporting(value):
        async def body(client: AsyncOpenAI, text: str, session) -> None:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
            if value is not None:
                await client.post(
                    "/reward", cast_to=httpx.Response, body={"reward": value, "extras": {"why": "t"}}
                )

        return SDKAgent(body)

    policy = ScriptedPolicy(tokenizer, lambda ids: "done", im_end)
    scored = await Episode(reporting(0.75), Task("w", ["Go."]), make_runtime(policy), reported).run()
    assert scored.status == "ok", scored.error
    assert scored.reward == 0.75 and scored.reward_extras["why"] == "t"
    missing = await Episode(reporting(None), Task("w", ["Go."]), make_runtime(policy), reported).run()
    assert missing.status == "reward_error" and "reported no reward" in missing.error


async def test_an_agent_process_that_dies_ends_its_episode_with_its_exit_code_and_last_lines(
    tokenizer, im_end, make_runtime, tmp_path
):
    crashing = ProcessAgent(
        name="crasher",
        command=[
            sys.executable,
            "-c",
            "import sys; print('no such module: magic', file=sys.stderr); sys.exit(3)",
        ],
        log_dir=str(tmp_path),
    )
    policy = ScriptedPolicy(tokenizer, lambda ids: "never", im_end)
    traj = await Episode(crashing, Task("d", ["Go."]), make_runtime(policy)).run()
    assert traj.status == "error"
    assert "exited with code 3" in traj.error and "no such module: magic" in traj.error
    assert not policy.prompts


def test_a_process_agent_round_trips_through_its_yaml_and_a_missing_program_is_refused(tmp_path):
    from aworld_train.core.errors import AgentSpecError
    from aworld_train.facade.trainer import _check_rebuild

    agent = process_agent("sdk_agent.py", "http://127.0.0.1:1/mcp")
    again = load_agent_spec(str(agent.write(tmp_path / "agent_spec.yaml")))
    assert again == agent
    _check_rebuild(again, [])
    with pytest.raises(AgentSpecError, match="no-such-agent-program.*not found.*fix `command`"):
        _check_rebuild(ProcessAgent(command="no-such-agent-program --flag"), [])
    with pytest.raises(AgentSpecError, match=r"env.TOKEN uses \$\{UNSET_TOKEN_VAR\}"):
        _check_rebuild(ProcessAgent(command=[sys.executable], env={"TOKEN": "${UNSET_TOKEN_VAR}"}), [])


async def test_concurrent_episodes_share_one_agent_process(
    calculator_server, tokenizer, im_end, make_runtime
):
    from aworld_train.rollout.episodes.batch import run_episodes
    from aworld_train.rollout.gateway.process_agent import agent_process

    agent = process_agent("sdk_agent.py", calculator_server.url).model_copy(update={"name": "shared"})
    tasks = [Task(f"t{i}", ["What is 37 * 48?"], ground_truth=1776) for i in range(8)]
    trajs = await run_episodes(agent, tasks, make_runtime(scripted(tokenizer, im_end), concurrency=8), REWARD)
    assert [t.reward for t in trajs] == [1.0] * 8, {t.error for t in trajs}
    assert agent_process(agent, gateway()).starts == 1


async def test_a_call_in_flight_when_its_episode_ends_gets_410_and_later_calls_404():
    class Hanging:  # an episode that has ended: it never answers again
        def check_call(self, *args, **kwargs) -> None:
            pass

        def ended(self) -> None:
            return None

        async def complete(self, *args, **kwargs):
            await asyncio.Event().wait()

    session = gateway().open(Hanging())
    url = f"{session.base_url}/chat/completions"
    headers = {"Authorization": f"Bearer {session.token}"}
    body = {"messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(timeout=30) as http:
        pending = asyncio.ensure_future(http.post(url, json=body, headers=headers))
        while not session.calls:  # the call reached the episode
            await asyncio.sleep(0.01)
        gateway().close(session)
        ended = await pending
        later = await http.post(url, json=body, headers=headers)
    assert ended.status_code == 410 and ended.json()["error"]["type"] == "episode_ended"
    assert later.status_code == 404


def test_the_example_agents_cancel_an_episodes_turns_when_it_ends(tmp_path):
    """turns.py, which both example agents serve through: after "end" nothing of the episode runs on
    (AWorld would retry the ended session's calls and dump them in the working folder)."""
    import subprocess

    agent = tmp_path / "agent.py"
    agent.write_text(
        "import asyncio, sys\n"
        "from turns import serve\n"
        "async def run_turn(turn, state):\n"
        "    try:\n"
        "        await asyncio.sleep(60)\n"
        "    except asyncio.CancelledError:\n"
        "        print('cancelled', turn['episode_id'], file=sys.stderr)\n"
        "        raise\n"
        "    return 'never'\n"
        "asyncio.run(serve(run_turn))\n"
    )
    turn = {"type": "turn", "episode_id": "e1", "user_turn": 0, "text": "hi"}
    lines = json.dumps(turn) + "\n" + json.dumps({"type": "end", "episode_id": "e1"}) + "\n"
    env = {"PYTHONPATH": str(EXAMPLE), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, str(agent)], input=lines, capture_output=True, text=True, env=env, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert "cancelled e1" in done.stderr and done.stdout == ""  # no answer for an ended episode
