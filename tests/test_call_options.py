"""What a client's call options ask of an episode, honoured without a token the policy did not
sample becoming loss: forced tool calls (tool_choice required or named) open with the template's
call text as prompt, `parallel_tool_calls: false` ends a turn after its first call, tool_choice
none refuses a call, a JSON schema is sampled under its grammar with the policy's own logprobs; a
call cut off at its token limit is never run; a call that carries no tools ends nothing while its
tool server is up."""

from __future__ import annotations

import json

import pytest
import torch

from aworld_train.agents.calculator import mcp_config
from aworld_train.rollout.episodes.driver import AgentRole, CallOptions, CallRefused
from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.policies.client import ScriptedPolicy
from aworld_train.rollout.policies.local import LocalPolicy
from aworld_train.rollout.policies.models import load_model

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "Evaluate an arithmetic expression",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "final_answer",
            "description": "Give the answer",
            "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}},
        },
    },
]
TASK = Task("t", ["What is 2 + 3?"], ground_truth=5)
MESSAGES = [{"role": "system", "content": "You compute."}, {"role": "user", "content": "What is 2 + 3?"}]


class CallsAgent:
    """An agent driver whose one turn makes the given calls to the episode's endpoint (messages,
    tools, options), answering each tool call with "5"; `seen` keeps the replies."""

    def __init__(self, calls: list[tuple[list[dict] | None, CallOptions]], mcp: dict | None = None) -> None:
        self.calls, self.seen = calls, []
        self.mcp_config = mcp or {}

    def roles(self) -> list[AgentRole]:
        return [AgentRole("agent", mcp_servers=list(self.mcp_config.get("mcpServers") or {}))]

    def start(self, endpoint, episode_id, task, max_assistant_turns):
        return self

    async def turn(self, user_turn: int, text: str) -> str | None:
        messages = list(MESSAGES)
        for tools, options in self.calls:
            reply = await self.endpoint.complete(messages, tools, "agent", options)
            self.seen.append(reply)
            assistant = {"role": "assistant", "content": reply.content}
            if reply.tool_calls:
                assistant["tool_calls"] = reply.tool_calls
            messages = [*messages, assistant]
            messages += [{"role": "tool", "tool_call_id": c["id"], "content": "5"} for c in reply.tool_calls]
        return None

    async def release(self) -> None:
        pass


async def run(calls, policy, make_runtime, mcp=None):
    agent = CallsAgent(calls, mcp)
    episode = Episode(agent, TASK, make_runtime(policy))
    agent.endpoint = episode
    return await episode.run(), agent.seen


def sampled_text(tokenizer, segment) -> str:
    return tokenizer.decode(
        [t for t, m in zip(segment.response_ids, segment.response_mask, strict=True) if m]
    )


def forced_text(tokenizer, segment) -> str:
    """The mask-0 text of a segment's response (what the template, or a forced opening, added)."""
    return tokenizer.decode(
        [t for t, m in zip(segment.response_ids, segment.response_mask, strict=True) if not m]
    )


async def test_a_required_call_opens_with_the_templates_call_text_as_prompt(tokenizer, im_end, make_runtime):
    """The policy is asked for the rest of a call after the template's call opening: the opening is
    in its prompt, never in its loss, and the reply carries the call the two make together."""
    policy = ScriptedPolicy(
        tokenizer, ['calculate", "arguments": {"expression": "2 + 3"}}\n</tool_call>', "It is 5."], im_end
    )
    traj, seen = await run(
        [(TOOLS, CallOptions(tool_choice="required")), (TOOLS, CallOptions())], policy, make_runtime
    )
    assert traj.status == "ok", traj.error
    assert tokenizer.decode(policy.prompts[0]).endswith('<|im_start|>assistant\n<tool_call>\n{"name": "')
    assert seen[0].tool_calls[0]["function"] == {"name": "calculate", "arguments": '{"expression": "2 + 3"}'}
    assert [(c.name, c.arguments) for c in traj.tool_calls] == [("calculate", {"expression": "2 + 3"})]
    (segment,) = traj.segments  # the next call extended the same ledger
    assert sampled_text(tokenizer, segment).startswith('calculate", "arguments"')
    assert forced_text(tokenizer, segment).startswith('<tool_call>\n{"name": "')
    # the forced text is the prompt of the call: the policy's logprobs cover exactly what it sampled
    first = segment.turn_starts[0]
    assert segment.ids[:first] == policy.prompts[0]


async def test_a_named_tool_choice_forces_the_name_and_the_policy_writes_the_arguments(
    tokenizer, im_end, make_runtime
):
    policy = ScriptedPolicy(tokenizer, [' {"answer": "5"}}\n</tool_call>'], im_end)
    options = CallOptions(tool_choice="function", tool_name="final_answer")
    traj, seen = await run([(TOOLS, options)], policy, make_runtime)
    assert tokenizer.decode(policy.prompts[0]).endswith('<tool_call>\n{"name": "final_answer", "arguments":')
    assert [(c.name, c.arguments) for c in traj.tool_calls] == [("final_answer", {"answer": "5"})]
    assert sampled_text(tokenizer, traj.segments[0]).startswith(' {"answer"')


async def test_tool_choice_none_makes_a_turn_that_calls_malformed(tokenizer, im_end, make_runtime):
    call = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "1"}}\n</tool_call>'
    traj, _ = await run(
        [(TOOLS, CallOptions(tool_choice="none"))], ScriptedPolicy(tokenizer, [call], im_end), make_runtime
    )
    assert traj.status == "malformed_tool_call"
    assert "tool_choice='none', but the turn calls calculate" in traj.error
    assert traj.tool_calls == []


def test_what_cannot_be_honoured_is_refused_before_sampling(tokenizer, im_end, make_runtime):
    episode = Episode(CallsAgent([]), TASK, make_runtime(ScriptedPolicy(tokenizer, [], im_end)))
    refusals = {
        "unknown tool": CallOptions(tool_choice="function", tool_name="weather"),
        "no tools": CallOptions(tool_choice="required"),
        "schema on a scripted policy": CallOptions(json_schema={"type": "object"}),
    }
    for case, options in refusals.items():
        with pytest.raises(CallRefused) as refused:
            episode.check_call("agent", MESSAGES, None if case == "no tools" else TOOLS, options=options)
        assert refused.value.status == 400, case
    with pytest.raises(CallRefused, match="not among the call's tools") as refused:
        episode.check_call("agent", MESSAGES, TOOLS, options=refusals["unknown tool"])
    assert refused.value.param == "tool_choice"
    with pytest.raises(CallRefused, match="cannot sample under a JSON schema") as refused:
        episode.check_call("agent", MESSAGES, TOOLS, options=refusals["schema on a scripted policy"])
    assert refused.value.param == "response_format"
    episode.check_call(
        "agent", MESSAGES, TOOLS, options=CallOptions(tool_choice="required", parallel_tool_calls=False)
    )


async def test_one_call_per_turn_ends_the_turn_after_its_first_call(tokenizer, im_end, make_runtime):
    first = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "2 + 3"}}\n</tool_call>'
    second = '\n<tool_call>\n{"name": "calculate", "arguments": {"expression": "4"}}\n</tool_call>'
    policy = ScriptedPolicy(tokenizer, [first + second, "5"], im_end)
    traj, seen = await run(
        [(TOOLS, CallOptions(parallel_tool_calls=False)), (TOOLS, CallOptions())], policy, make_runtime
    )
    assert traj.status == "ok", traj.error
    assert len(seen[0].tool_calls) == 1
    (segment,) = traj.segments
    kept = policy.generations[0].token_ids[: len(tokenizer.encode(first, add_special_tokens=False))]
    start = segment.turn_starts[0] - len(segment.prompt_ids)
    assert segment.response_ids[start : start + len(kept)] == kept  # the policy's own tokens, cut
    assert sampled_text(tokenizer, segment).startswith(first) and "4" not in sampled_text(tokenizer, segment)
    assert traj.finish_reasons[0] == "stop"


async def test_a_call_cut_off_at_its_token_limit_is_never_run(tokenizer, im_end, make_runtime):
    cut = ScriptedPolicy(
        tokenizer,
        [
            tokenizer.encode(
                '<tool_call>\n{"name": "calculate", "arguments": {"expr', add_special_tokens=False
            )
        ],
        im_end,
    )
    traj, seen = await run([(TOOLS, CallOptions())], cut, make_runtime)
    assert traj.status == "truncated" and "inside a tool call" in traj.error
    assert traj.tool_calls == [] and seen == []
    # a whole call whose turn reached the limit before its end is not run either
    whole = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "1"}}'
    whole_ids = tokenizer.encode(whole, add_special_tokens=False)
    policy = ScriptedPolicy(tokenizer, [whole_ids], im_end)
    traj, _ = await run([(TOOLS, CallOptions(max_tokens=len(whole_ids)))], policy, make_runtime)
    assert traj.status == "truncated" and traj.tool_calls == []


async def test_a_call_without_tools_ends_nothing_while_the_server_lists_its_tools(
    tokenizer, im_end, make_runtime, calculator_server
):
    """A final-answer or structured-output call carries no tools; the calculator server is up and
    lists its tools, so the episode goes on (it used to end as 'listed no tools')."""
    policy = ScriptedPolicy(tokenizer, ["The answer is 5."], im_end)
    traj, seen = await run([(None, CallOptions())], policy, make_runtime, mcp_config(calculator_server.url))
    assert traj.status == "ok", traj.error
    assert seen[0].content == "The answer is 5."


@pytest.fixture(scope="module")
def tiny_policy(tiny_model_dir, tokenizer, stop_ids):
    return LocalPolicy(load_model(str(tiny_model_dir), dtype=torch.float32), tokenizer, stop_ids)


SCHEMA = {
    "type": "object",
    "properties": {"exact": {"type": "boolean"}, "unit": {"type": "string", "enum": ["m", "s"]}},
    "required": ["exact", "unit"],
    "additionalProperties": False,
}


async def test_a_json_schema_is_sampled_under_its_grammar_with_the_policys_own_logprobs(
    tiny_policy, tokenizer, make_runtime
):
    """Even a random model answers in the schema; each sampled token's recorded logprob is the
    policy's own over the whole vocabulary (what the trainer recomputes), not the masked one."""
    traj, seen = await run(
        [(None, CallOptions(json_schema=SCHEMA, max_tokens=48))], tiny_policy, make_runtime, None
    )
    assert traj.status == "ok", traj.error
    answer = json.loads(seen[0].content)
    assert set(answer) == {"exact", "unit"}
    assert isinstance(answer["exact"], bool) and answer["unit"] in ("m", "s")
    (segment,) = traj.segments
    ids = torch.tensor([segment.ids])
    with torch.no_grad():
        logits = tiny_policy.model(ids).logits[0].float()
    logp = torch.log_softmax(logits, -1)
    for k, (token, mask, recorded) in enumerate(
        zip(segment.response_ids, segment.response_mask, segment.response_logprobs, strict=True)
    ):
        if mask:
            at = len(segment.prompt_ids) + k
            assert recorded == pytest.approx(float(logp[at - 1, token]), abs=1e-4)


def test_a_schema_the_grammar_engine_refuses_is_a_400(tiny_policy, make_runtime):
    episode = Episode(CallsAgent([]), TASK, make_runtime(tiny_policy))
    with pytest.raises(CallRefused, match="response_format") as refused:
        episode.check_call("agent", MESSAGES, None, options=CallOptions(json_schema={"type": "no-such-type"}))
    assert refused.value.param == "response_format"
