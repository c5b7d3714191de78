"""Agents that rewrite their own context, as agent drivers, for the tests of every engine
(tests/test_rewriting_agents.py: the local learner and verl; tests/areal_env/test_areal_rewrites.py:
AReaL), and the scripted policy their episodes sample from.

Each works a three-step sum with the `calculate` tool (2 * 3, then 6 + 4, then 10 - 1: the answer
is 9) and answers; its tool results it computes itself (no MCP server). What it sends its LLM:

- `trims`: the task and its last exchange only (the call and its result): from its third call on,
  its oldest turns are gone, so each call begins a segment;
- `summarises`: after two tool rounds it asks its own LLM (the policy) for a summary, then goes on
  from the task and that summary alone: the summary call is a segment (the policy's own answer, trained),
  and the calls after it one more;
- `compacts`: every tool result but the latest is replaced by a short placeholder, so each call after
  the second rewrites an earlier message and begins a segment.

An episode's outcome is `right` (all three steps, then "The answer is 9.") or `wrong` (one step,
then a wrong answer, in one segment).
"""

from __future__ import annotations

import json
from typing import Any

from aworld_train.rollout.episodes.driver import AgentRole
from aworld_train.rollout.policies.client import Generation, SamplingParams, ScriptedPolicy

AGENT = "rewriter"
KINDS = ("trims", "summarises", "compacts")
SYSTEM = "You solve sums step by step with the calculate tool."
QUESTION = "What is (2 * 3 + 4) - 1?"
SUMMARISE = "Summarise the work so far in one line."
SUMMARY = "Summary: 2 * 3 = 6, then 6 + 4 = 10."
STEPS = ("2 * 3", "6 + 4", "10 - 1")
ANSWER, WRONG = "The answer is 9.", "The answer is 8."
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
    }
]


def call_text(expression: str) -> str:
    arguments = json.dumps({"name": "calculate", "arguments": {"expression": expression}})
    return f"<tool_call>\n{arguments}\n</tool_call>"


def replies(kind: str, outcome: str) -> list[str]:
    """What the policy answers in one episode, call by call."""
    if outcome == "wrong":
        return [call_text(STEPS[0]), WRONG]
    calls = [call_text(e) for e in STEPS]
    if kind == "summarises":
        return [*calls[:2], SUMMARY, calls[2], ANSWER]
    return [*calls, ANSWER]


def result(call: dict[str, Any]) -> str:
    expression = json.loads(call["function"]["arguments"])["expression"]
    return f"The result of {expression} is {eval(expression)}."  # noqa: S307 (the script's own sums)


class RewritingAgent:
    """An agent driver (rollout/episodes/driver.py) of one of KINDS."""

    mcp_config: dict = {}

    def __init__(self, kind: str) -> None:
        assert kind in KINDS, kind
        self.kind = kind

    def roles(self) -> list[AgentRole]:
        return [AgentRole(AGENT)]

    def start(self, endpoint, episode_id: str, task, max_assistant_turns: int) -> _Run:
        return _Run(self.kind, endpoint)


class _Run:
    def __init__(self, kind: str, endpoint) -> None:
        self.kind, self.endpoint = kind, endpoint

    def view(self, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What the agent sends of its history after the task."""
        if self.kind == "trims":
            return history[-2:]
        if self.kind == "compacts":
            last = max((i for i, m in enumerate(history) if m["role"] == "tool"), default=-1)
            return [
                {**m, "content": "[result compacted]"} if m["role"] == "tool" and i != last else m
                for i, m in enumerate(history)
            ]
        return history

    async def turn(self, user_turn: int, text: str) -> str | None:
        task = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
        history: list[dict[str, Any]] = []
        rounds = 0
        while True:
            reply = await self.endpoint.complete(task + self.view(history), TOOLS, AGENT)
            assistant: dict[str, Any] = {"role": "assistant", "content": reply.content}
            if reply.tool_calls:
                assistant["tool_calls"] = reply.tool_calls
            history.append(assistant)
            if not reply.tool_calls:
                return None
            history += [
                {"role": "tool", "tool_call_id": c["id"], "content": result(c)} for c in reply.tool_calls
            ]
            rounds += 1
            if self.kind == "summarises" and rounds == 2:
                history = [
                    {"role": "user", "content": f"Progress so far: {await self.summary(task, history)}"}
                ]

    async def summary(self, task: list[dict[str, Any]], history: list[dict[str, Any]]) -> str:
        """A summary of the work so far, written by the agent's own LLM (the policy)."""
        transcript = "\n".join(
            f"{m['role']}: {m.get('content') or m.get('tool_calls')}" for m in task + history
        )
        reply = await self.endpoint.complete(
            [{"role": "system", "content": SUMMARISE}, {"role": "user", "content": transcript}], None, AGENT
        )
        return reply.content

    async def release(self) -> None:
        pass


class AnswerReward:
    """1 for the right answer, else 0."""

    reference = "tests/rewriting_agents.py:AnswerReward"

    def __call__(self, traj, sample: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        return (1.0 if traj.final_answer.strip() == ANSWER else 0.0), {}


class EpisodePolicy(ScriptedPolicy):
    """One episode's scripted policy: each call's tokens carry their own weight version (the call's
    number) and logprobs of their own, so a token moved between calls or rows shows."""

    def __init__(self, tokenizer, script: list[str], stop_token_id: int) -> None:
        super().__init__(tokenizer, script, stop_token_id)

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        calls = len(self.generations)
        self.version, self.logprob = calls + 1, -0.1 * (calls + 1)
        return await super().generate(prompt_ids, sampling)


def sampled(segment) -> tuple[list[int], list[float], list[int]]:
    """A segment's mask-1 tokens: ids, logprobs, versions."""
    keep = [i for i, m in enumerate(segment.response_mask) if m]
    return (
        [segment.response_ids[i] for i in keep],
        [segment.response_logprobs[i] for i in keep],
        [segment.response_versions[i] for i in keep],
    )


def rewriting_episode(kind: str, tokenizer, outcome: str = "right", episode_id: str = "rewrites"):
    """One scored episode of the agent `kind`, sampled from its script (tool block never, as the
    tests' runs render)."""
    import asyncio

    from aworld_train.rollout.episodes.episode import Episode
    from aworld_train.rollout.episodes.runtime import RolloutRuntime
    from aworld_train.rollout.episodes.settings import RolloutSettings
    from aworld_train.rollout.episodes.trajectory import Task
    from aworld_train.rollout.policies.router import PolicyRouter
    from aworld_train.rollout.tokens.templates.renderer import renderer_for
    from aworld_train.rollout.tokens.turns.stops import stop_token_ids

    settings = RolloutSettings(tool_block="never", max_assistant_turns=6)
    stops = stop_token_ids(tokenizer)
    policy = EpisodePolicy(tokenizer, replies(kind, outcome), tokenizer.convert_tokens_to_ids("<|im_end|>"))
    runtime = RolloutRuntime(PolicyRouter(policy), renderer_for(tokenizer, settings), stops, settings)
    task = Task("sum", [QUESTION], ground_truth=9)
    return asyncio.run(Episode(RewritingAgent(kind), task, runtime, AnswerReward(), episode_id).run())
