"""The four-tool assistant: deterministic tools, the five-part reward by hand, a real episode."""

from __future__ import annotations

import json

import pytest

from aworld_train.env.four_tools import tools
from aworld_train.inputs.dataset import load_tasks
from aworld_train.inputs.reward import RewardFunction
from aworld_train.rewards.four_tools import parts, turn_answers
from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import ToolCallRecord, Trajectory
from aworld_train.rollout.policies.client import ScriptedPolicy

REWARD = RewardFunction.load("aworld_train.rewards.four_tools:five_part_reward")


def traj(turns: list[list[tuple]], answers: list[str | None]) -> Trajectory:
    """A trajectory from (name, arguments, result[, error]) calls and a final answer per user turn."""
    t = Trajectory("e", "t")
    t.messages = [{"role": "system", "content": "s"}]
    for turn, (calls, answer) in enumerate(zip(turns, answers, strict=True)):
        t.messages.append({"role": "user", "content": f"question {turn}"})
        for i, (name, arguments, result, *error) in enumerate(calls):
            cid = f"c{turn}{i}"
            t.tool_calls.append(ToolCallRecord(cid, name, arguments, result, bool(error), 0, turn))
            t.messages.append({"role": "assistant", "content": "", "tool_calls": [{"id": cid, "name": name}]})
            t.messages.append({"role": "tool", "content": result, "tool_call_id": cid})
        if answer is not None:
            t.messages.append({"role": "assistant", "content": answer})
    return t


TWO_TURNS = {
    "turns": [
        {"calls": [{"name": "calculator", "arguments": {"expression": "12 * 3"}}], "answer": "36"},
        {
            "calls": [{"name": "weather_query", "arguments": {"city": "Oslo", "date": "2025-07-01"}}],
            "answer": "17",
        },
    ]
}


def test_five_parts_by_hand():
    t = traj(
        [
            [("calculator", {"expression": "12*3"}, "36")],
            [
                (
                    "search",
                    {"query": "eiffel"},
                    "1. Eiffel Tower: The Eiffel Tower in Paris is 330 metres tall.",
                ),
                ("weather_query", {"city": "oslo ", "date": "2025-07-01"}, "Oslo on 2025-07-01: sunny, 17°C"),
            ],
        ],
        ["It is 36.", "About 20 degrees."],
    )
    sample = {"ground_truth": json.dumps(TWO_TURNS)}
    got = parts(t, sample["ground_truth"])
    # tool_call: both expected calls matched (12*3 == 12 * 3 by value; 'oslo ' == 'Oslo'), 3 calls made
    # necessity: turn 0 {calculator} = {calculator} -> 1; turn 1 {weather} vs {search, weather} -> 1/2
    # result_use: 36 is in answer 0; neither 330/1 nor 17/2025 is in "About 20 degrees." -> 1/3
    # answer: 36 right, 17 wrong -> 1/2; coherence: both answers fine -> 1
    assert got == pytest.approx(
        {"tool_call": 2 / 3, "necessity": 0.75, "result_use": 1 / 3, "answer": 0.5, "coherence": 1.0}
    )
    score, extras = REWARD(t, sample)
    assert score == pytest.approx(0.3 * 2 / 3 + 0.2 * 0.75 + 0.2 / 3 + 0.2 * 0.5 + 0.1)  # 0.61667
    assert extras == pytest.approx(got)


def test_zero_tool_task_and_an_unneeded_call():
    truth = json.dumps({"turns": [{"calls": [], "answer": None}]})
    assert REWARD(traj([[]], ["Hello! How can I help?"]), {"ground_truth": truth})[0] == 1.0
    needless = traj([[("get_current_time", {}, "2025-06-10 14:05 UTC")]], ["Hi there."])
    score, extras = REWARD(needless, {"ground_truth": truth})
    # tool_call 0/max(0, 1) = 0, necessity {} vs {time} = 0, result_use 0/1, answer (none graded) 1, coherence 1
    assert extras == {"tool_call": 0.0, "necessity": 0.0, "result_use": 0.0, "answer": 1.0, "coherence": 1.0}
    assert score == pytest.approx(0.2 + 0.1)


def test_failed_calls_unfinished_turns_and_custom_weights():
    t = traj([[("calculator", {"expression": "12 * 3"}, "Error executing tool calculator: x", True)]], [None])
    # the second turn never came; the first ended on a tool result: no final answers
    assert turn_answers(t.messages, 2) == [None, None]
    got = parts(t, TWO_TURNS)
    # the failed call matches nothing: 0/max(2, 1); necessity: turn 0 {calc}={calc} 1, turn 1 {weather} vs {} 0
    assert got == {"tool_call": 0.0, "necessity": 0.5, "result_use": 0.0, "answer": 0.0, "coherence": 0.0}
    weighted = RewardFunction.load(
        "aworld_train.rewards.four_tools:five_part_reward",
        kwargs={"necessity_weight": 1.0, "tool_call_weight": 0.0},
    )
    assert weighted(t, {"ground_truth": TWO_TURNS})[0] == pytest.approx(0.5)


def test_tools_are_deterministic():
    assert tools.weather("Oslo", "2025-07-01") == tools.weather("oslo", "2025-07-01")
    assert tools.clock("train-3") == tools.clock("train-3") != tools.clock("train-4")
    assert tools.current_time("train-3").endswith(" UTC")
    assert tools.search("How tall is the Eiffel Tower?")[0][0] == "Eiffel Tower"
    assert tools.calculate("2 ** 10") == "1024"


@pytest.fixture(scope="module")
def four_tools_server():
    from aworld_train.env.launcher import start_server

    server = start_server("four-tools")
    yield server
    server.stop()


async def test_an_episode_that_uses_the_tools_right_scores_one(
    tokenizer, im_end, make_runtime, four_tools_server
):
    from aworld_train.agents.four_tools import build_agent
    from aworld_train.aworld.specs import load_agent_spec

    rows = [json.loads(line) for line in open("examples/four_tools/test.jsonl")]
    row = next(
        r for r in rows if len(r["conversation"]) == 2 and "temperature" in r["conversation"][0]["content"]
    )
    task = load_tasks([row], prompt_key="conversation")[0]
    turns = json.loads(row["ground_truth"])["turns"]

    def step(prompt_ids: list[int]) -> str:
        text = tokenizer.decode(prompt_ids)
        turn = max(
            i for i, question in enumerate(task.user_turns) if question in text
        )  # past the few-shot turns
        since = text.rsplit("<|im_start|>user", 1)[1]
        if "<|im_start|>tool" not in since and "<tool_response>" not in since:
            expected = turns[turn]["calls"][0]
            return f"<tool_call>\n{json.dumps({'name': expected['name'], 'arguments': expected['arguments']})}\n</tool_call>"
        return f"The answer is {turns[turn]['answer']}."

    spec = load_agent_spec(build_agent(url=four_tools_server.url))
    runtime = make_runtime(ScriptedPolicy(tokenizer, step, im_end), max_assistant_turns=3)
    result = await Episode(spec, task, runtime, REWARD).run()
    assert result.status == "ok", result.error
    assert [c.name for c in result.tool_calls] == ["weather_query", "calculator"]
    # the server's weather for the row's city and date is the one the data generator wrote down
    assert f"{turns[0]['answer']}°C" in result.tool_calls[0].result
    assert result.reward == pytest.approx(1.0), result.reward_extras
