"""An AWorld agent's own context settings (its memory_config: `history_rounds`, `enable_summary`)
decide what each of its LLM calls sees, as in AWorld, and train token-exact: each rewrite of the
history begins a segment that holds its calls' tokens as sampled, and a summary is the agent's own
call to the policy (train/aworld/history.py)."""

from __future__ import annotations

import asyncio

import pytest
from rewriting_agents import EpisodePolicy, sampled

from aworld_train.inputs.reward import RewardFunction
from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.samples.codec import episode_samples

TASK = Task("t", ["What is (2 * 3 + 4) - 1?"], ground_truth=9)
SUMMARY = "SUMMARY: 2 * 3 = 6; 6 + 4 = 10."


def call(expression: str) -> str:
    return (
        f'<tool_call>\n{{"name": "calculate", "arguments": {{"expression": "{expression}"}}}}\n</tool_call>'
    )


def result(value: int) -> str:
    """A calculator result as the chat template renders it."""
    return f"<tool_response>\n{value}\n</tool_response>"


CALLS = [call("2 * 3"), call("6 + 4"), call("10 - 1")]


def run(calculator_spec, memory: dict, script: list, make_runtime, tokenizer, im_end):
    spec = calculator_spec.model_copy(update={"few_shot": []})
    spec = spec.model_copy(update={"agent_config": {**spec.agent_config, "memory_config": memory}})
    policy = EpisodePolicy(tokenizer, script, im_end)
    runtime = make_runtime(policy, max_assistant_turns=8)
    reward = RewardFunction.load("aworld_train.rewards.calculator:exact_answer")
    return asyncio.run(Episode(spec, TASK, runtime, reward).run()), policy


def assert_segments_hold_the_calls_as_sampled(traj, policy):
    done = 0
    prompts = iter(policy.prompts)
    for seg in traj.segments:
        gens = policy.generations[done : done + len(seg.turn_starts)]
        done += len(seg.turn_starts)
        ids, logprobs, versions = sampled(seg)
        assert ids == [t for g in gens for t in g.token_ids]
        assert logprobs == [lp for g in gens for lp in g.logprobs]
        assert versions == [v for g in gens for v in g.versions]
        for start in seg.turn_starts:  # every prompt the policy got is its segment's prefix
            assert seg.ids[:start] == next(prompts)
    assert done == len(policy.generations)


def test_without_settings_the_history_grows_in_one_segment(calculator_spec, make_runtime, tokenizer, im_end):
    traj, policy = run(calculator_spec, {}, [*CALLS, "The answer is 9."], make_runtime, tokenizer, im_end)
    assert traj.status == "ok" and traj.reward == 1.0, traj.error
    assert len(traj.segments) == 1 and traj.history_rewrites == 0
    assert_segments_hold_the_calls_as_sampled(traj, policy)


def test_history_rounds_trims_what_each_call_sees_and_each_trim_begins_a_segment(
    calculator_spec, make_runtime, tokenizer, im_end
):
    memory = {"history_rounds": 2}
    traj, policy = run(calculator_spec, memory, [*CALLS, "The answer is 9."], make_runtime, tokenizer, im_end)
    assert traj.status == "ok" and traj.reward == 1.0, traj.error
    assert len(traj.segments) == 3 and traj.history_rewrites == 2
    assert_segments_hold_the_calls_as_sampled(traj, policy)
    # the last call saw the task and the last call's result, not the first call's
    last = tokenizer.decode(policy.prompts[-1])
    assert TASK.user_turns[0] in last and result(9) in last and result(6) not in last
    untrimmed, _ = run(calculator_spec, {}, [*CALLS, "The answer is 9."], make_runtime, tokenizer, im_end)
    assert len(policy.prompts[-1]) < len(untrimmed.segments[0].ids)


def test_a_summary_is_the_agents_own_call_and_the_calls_after_it_see_it(
    calculator_spec, make_runtime, tokenizer, im_end
):
    memory = {"enable_summary": True, "summary_rounds": 4}
    script = [*CALLS, SUMMARY, "The answer is 9."]
    traj, policy = run(calculator_spec, memory, script, make_runtime, tokenizer, im_end)
    assert traj.status == "ok" and traj.reward == 1.0, traj.error
    assert len(policy.generations) == 5  # the summary came before the last call, not in the background
    assert len(traj.segments) == 3 and traj.history_rewrites == 2
    assert_segments_hold_the_calls_as_sampled(traj, policy)
    summary, after = traj.segments[1], traj.segments[2]
    assert tokenizer.decode(sampled(summary)[0]).startswith(SUMMARY)  # sampled, so it trains
    assert SUMMARY in tokenizer.decode(after.prompt_ids)
    assert result(6) not in tokenizer.decode(after.prompt_ids)  # the summarised results are gone


def test_a_failed_summary_call_fails_the_episode(calculator_spec, make_runtime, tokenizer, im_end):
    def lost(_):
        raise RuntimeError("the policy server is gone")

    memory = {"enable_summary": True, "summary_rounds": 4}
    traj, policy = run(
        calculator_spec, memory, [*CALLS, lost, "The answer is 9."], make_runtime, tokenizer, im_end
    )
    assert "output new summary" in tokenizer.decode(policy.prompts[3])  # the call that failed: the summary
    assert traj.status == "error" and "the policy server is gone" in (traj.error or "")
    assert traj.reward is None and not episode_samples(traj).in_baseline


@pytest.mark.parametrize("memory", [{"history_rounds": 2}, {"enable_summary": True, "summary_rounds": 4}])
def test_the_same_script_gives_the_same_segments_every_time(
    memory, calculator_spec, make_runtime, tokenizer, im_end
):
    script = [*CALLS, SUMMARY, "The answer is 9."] if memory.get("enable_summary") else [*CALLS, "9"]
    first, _ = run(calculator_spec, memory, script, make_runtime, tokenizer, im_end)
    second, _ = run(calculator_spec, memory, script, make_runtime, tokenizer, im_end)
    assert [s.ids for s in first.segments] == [s.ids for s in second.segments]
