"""The per-episode trims of AWorld change nothing an episode records.

`data/calculator_trajectories.json` holds scripted calculator episodes (one tool call; two user
turns; a tool error) as the AWorld path recorded them before any trim (commit 3d5267e): every
prompt sent to the policy, the ledger's ids, masks, logprobs and turn starts, the messages and
the tool calls. Today's path must record the same, token for token.
Rewrite the file (only for a deliberate change): python tests/test_trajectory_parity.py --write
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from aworld_train.inputs.reward import RewardFunction
from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.policies.client import ScriptedPolicy

RECORDED = Path(__file__).parent / "data" / "calculator_trajectories.json"


def call(name: str, args: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


SCRIPTS = {
    "one_call": (
        Task("a", ["What is 37 * 48?"], ground_truth=1776),
        [call("calculate", {"expression": "37 * 48"}), "The answer is 1776."],
    ),
    "two_user_turns": (
        Task("b", ["What is 2 + 3?", "Now multiply that by 4."], ground_truth=20),
        [
            call("calculate", {"expression": "2 + 3"}),
            "It is 5.",
            call("last_result", {}),
            call("calculate", {"expression": "5 * 4"}),
            "The answer is 20.",
        ],
    ),
    "tool_error": (
        Task("c", ["What is x?"], ground_truth=1),
        [call("calculate", {"expression": "abs(1)"}), "I cannot."],
    ),
}


async def record(spec, runtime_for) -> dict:
    reward = RewardFunction.load("aworld_train.rewards.calculator:exact_answer")
    out = {}
    for name, (task, script) in SCRIPTS.items():
        runtime = runtime_for(script)
        t = await Episode(spec, task, runtime, reward).run()
        out[name] = {
            "status": t.status,
            "reward": t.reward,
            "final_answer": t.final_answer,
            "num_turns": t.num_turns,
            "messages": t.messages,
            "tool_calls": [
                [c.name, c.arguments, c.result, c.error, c.turn, c.user_turn] for c in t.tool_calls
            ],
            "segments": [
                [s.prompt_ids, s.response_ids, s.response_mask, s.response_logprobs, s.turn_starts]
                for s in t.segments
            ],
            "prompts": runtime.router.default.prompts,
        }
    return json.loads(json.dumps(out))  # the JSON file's shapes (lists, not tuples)


@pytest.fixture
def runtime_for(tokenizer, stop_ids):
    from aworld_train.inputs.config import RolloutSettings
    from aworld_train.rollout.episodes.runtime import RolloutRuntime
    from aworld_train.rollout.policies.router import PolicyRouter
    from aworld_train.rollout.tokens.templates.renderer import ChatRenderer

    def make(script):
        policy = ScriptedPolicy(tokenizer, script, stop_ids[0])
        return RolloutRuntime(PolicyRouter(policy), ChatRenderer(tokenizer), stop_ids, RolloutSettings())

    return make


async def test_episodes_record_what_they_recorded_before_the_trims(calculator_url, runtime_for):
    from aworld_train.agents.calculator import build_agent
    from aworld_train.aworld.specs import load_agent_spec

    now = await record(load_agent_spec(build_agent()), runtime_for)  # with its few-shot turns
    before = json.loads(RECORDED.read_text())
    assert {k: v["status"] for k, v in now.items()} == {k: "ok" for k in SCRIPTS}
    for name in SCRIPTS:
        assert now[name] == before[name], name


def _write() -> None:  # pragma: no cover - run by hand
    import asyncio
    import os

    from aworld_train.agents.calculator import build_agent
    from aworld_train.aworld.specs import load_agent_spec
    from aworld_train.env.launcher import start_server
    from aworld_train.inputs.config import RolloutSettings
    from aworld_train.rollout.episodes.runtime import RolloutRuntime
    from aworld_train.rollout.policies.models import load_tokenizer
    from aworld_train.rollout.policies.router import PolicyRouter
    from aworld_train.rollout.tokens.templates.renderer import ChatRenderer
    from aworld_train.rollout.tokens.turns.stops import stop_token_ids

    tokenizer = load_tokenizer("embedded:smollm2-135m")
    stops = stop_token_ids(tokenizer)

    def make(script):
        policy = ScriptedPolicy(tokenizer, script, stops[0])
        return RolloutRuntime(PolicyRouter(policy), ChatRenderer(tokenizer), stops, RolloutSettings())

    with start_server("calculator") as server:
        os.environ["CALCULATOR_MCP_URL"] = server.url
        RECORDED.write_text(json.dumps(asyncio.run(record(load_agent_spec(build_agent()), make))))


if __name__ == "__main__" and "--write" in sys.argv:
    _write()
