"""Agents written with popular frameworks train unchanged through the gateway: the OpenAI Agents SDK
on its default model (the Responses API), LangGraph's ReAct agent ending in a structured answer
(`response_format`, sampled under the schema's grammar, with no tools) and smolagents' default
ToolCallingAgent (`tool_choice: "required"` on every call, a final-answer tool, a history it
rewrites as text). Each runs in the frameworks' own environment (`make setup-agents`), exactly as
examples/calculator_gateway/ ships it.

A scripted policy shows each record exact, call by call; one GRPO step of each on the embedded
model shows every sampled token's recorded logprob to be the policy's own on the recorded ids,
and no episode ending with a cause that is not its own.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from aworld_train import AgentTrainer
from aworld_train.agents.calculator import FEW_SHOT, mcp_config
from aworld_train.inputs.config import load_config
from aworld_train.inputs.reward import RewardFunction
from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.gateway.process_agent import ProcessAgent
from aworld_train.rollout.policies.client import ScriptedPolicy
from aworld_train.rollout.policies.models import load_model
from aworld_train.rollout.samples.codec import episode_samples

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "calculator_gateway"
PYTHON = Path(os.environ.get("AWORLD_TRAIN_FRAMEWORKS_PYTHON") or ROOT / ".venv-agents" / "bin" / "python")
FRAMEWORKS = ("openai_agents_agent", "langgraph_agent", "smolagents_agent")
REWARD = RewardFunction.load("aworld_train.rewards.calculator:exact_answer")
TASK = Task("t1", ["What is 37 * 48?"], ground_truth=1776)
# how an episode may end when the policy is a real model: its own doing, never the harness's
OWN_ENDINGS = {"ok", "truncated", "malformed_tool_call", "max_turns"}

if not PYTHON.is_file():
    if os.environ.get("CI"):
        raise RuntimeError(f"CI runs the agent frameworks' tests: no {PYTHON} (make setup-agents builds it)")
    pytest.skip(f"no agent frameworks' Python at {PYTHON}: make setup-agents", allow_module_level=True)


class CalculatorScript(ScriptedPolicy):
    """Calls the calculator, then answers: as text, as the final-answer tool a forced call names,
    or as JSON where the call asks for a schema. It keeps the grammar each call asked for."""

    def __init__(self, tokenizer, im_end) -> None:
        super().__init__(tokenizer, self.reply, im_end)
        self.grammars: list = []

    def check_grammar(self, key) -> None:  # answers in the schema by script
        pass

    async def generate(self, prompt_ids, sampling):
        self.grammars.append(sampling.grammar)
        return await super().generate(prompt_ids, sampling)

    def reply(self, ids: list[int]) -> str:
        text = self.tokenizer.decode(ids)
        computed = "1776" in text.split("What is 37 * 48")[-1]
        if text.endswith('{"name": "'):  # a forced call: the policy writes the name and the arguments
            if computed:
                return 'final_answer", "arguments": {"answer": "1776"}}\n</tool_call>'
            return 'calculate", "arguments": {"expression": "37 * 48"}}\n</tool_call>'
        if computed:
            return '{"answer": "1776"}' if self.grammars[-1] else "The answer is 1776."
        return '<tool_call>\n{"name": "calculate", "arguments": {"expression": "37 * 48"}}\n</tool_call>'


def framework_agent(script: str, url: str) -> ProcessAgent:
    return ProcessAgent(
        name="calculator_agent",
        command=[str(PYTHON), str(EXAMPLE / f"{script}.py")],
        env={"CALCULATOR_MCP_URL": url},
        mcp_config=mcp_config(url),
        mcp_servers=["calculator"],
        few_shot=FEW_SHOT,
    )


def assert_exact(traj, policy: ScriptedPolicy) -> None:
    """Every policy call's prompt is its segment's ids up to the call, and the segments' sampled
    ids are exactly what the policy returned, in order, each with its logprob."""
    prompts = [seg.ids[:start] for seg in traj.segments for start in seg.turn_starts]
    assert prompts == policy.prompts
    masks = [m for seg in traj.segments for m in seg.response_mask]
    sampled = [t for seg in traj.segments for t in seg.response_ids]
    logprobs = [lp for seg in traj.segments for lp in seg.response_logprobs]
    assert [t for t, m in zip(sampled, masks, strict=True) if m] == [
        t for gen in policy.generations for t in gen.token_ids
    ]
    assert [lp for lp, m in zip(logprobs, masks, strict=True) if m] == [
        lp for gen in policy.generations for lp in gen.logprobs
    ]


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_each_framework_trains_unchanged_with_an_exact_record(
    framework, calculator_server, tokenizer, im_end, make_runtime
):
    policy = CalculatorScript(tokenizer, im_end)
    agent = framework_agent(framework, calculator_server.url)
    traj = await Episode(agent, TASK, make_runtime(policy, max_assistant_turns=8), REWARD).run()
    assert traj.status == "ok", traj.error
    assert traj.reward == 1.0 and "1776" in traj.final_answer
    assert_exact(traj, policy)
    calls = [(c.name, c.arguments) for c in traj.tool_calls]
    assert calls[0] == ("calculate", {"expression": "37 * 48"})
    if framework == "smolagents_agent":
        # tool_choice "required" on every call: each call opened with the template's call text
        assert traj.forced_calls == 2 and calls[1] == ("final_answer", {"answer": "1776"})
        assert all(tokenizer.decode(p).endswith('<tool_call>\n{"name": "') for p in policy.prompts)
    elif framework == "langgraph_agent":
        # the structured answer: the last call carries no tools and asks for the Answer schema
        schema, call_opening = policy.grammars[-1]
        assert json.loads(schema)["required"] == ["answer"] and call_opening is None
        assert traj.final_answer == "1776"
    else:
        assert [c.result for c in traj.tool_calls] == ["1776"]  # its function_call_output came back


class InventingScript(ScriptedPolicy):
    """Calls a tool no agent offers, by a name it made up, as a small model sometimes does."""

    CALL = '"add_minus_2_96", "arguments": {"a": 37, "b": 48}}\n</tool_call>'

    def __init__(self, tokenizer, im_end) -> None:
        super().__init__(tokenizer, self.reply, im_end)

    def reply(self, ids: list[int]) -> str:
        if self.tokenizer.decode(ids).endswith('{"name": "'):  # a forced call: the policy writes the name
            return self.CALL[1:]
        return '<tool_call>\n{"name": ' + self.CALL


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_tool_name_the_policy_invents_ends_the_episode_malformed_whatever_the_framework(
    framework, calculator_server, tokenizer, im_end, make_runtime
):
    """Passed on, the call would make the OpenAI Agents SDK raise (`ModelBehaviorError: Tool
    add_minus_2_96 not found`) and the episode end as an error, which trains nothing; the gateway
    never passes it on, so the episode is the policy's malformed call, trained at reward 0 where
    rollout.train_on_malformed says so."""
    policy = InventingScript(tokenizer, im_end)
    agent = framework_agent(framework, calculator_server.url)
    traj = await Episode(agent, TASK, make_runtime(policy, max_assistant_turns=8), REWARD).run()
    assert traj.status == "malformed_tool_call", traj.error
    assert traj.error.startswith("the turn calls 'add_minus_2_96', not among the call's tools (calculate")
    assert traj.reward == 0.0 and traj.tool_calls == [] and len(policy.generations) == 1
    assert episode_samples(traj, train_on_malformed=True).trainable
    assert not episode_samples(traj, train_on_malformed=False).trainable


def recorded_and_recomputed(
    model, run: Path, temperature: float
) -> tuple[list[float], list[float], list[str]]:
    """Every sampled token's recorded logprob and the model's logprob of the same id after the same
    ids (at the run's sampling temperature), over the run's token files; and the episodes' statuses."""
    recorded, recomputed, statuses = [], [], []
    for part in sorted((run / "tokens").rglob("part-*.parquet")):
        for row in pq.read_table(part).to_pylist():
            statuses.append(row["status"])
            for seg in row["segments"]:
                ids = seg["prompt_ids"] + seg["response_ids"]
                with torch.no_grad():
                    logits = model(torch.tensor([ids])).logits[0].float()
                logp = torch.log_softmax(logits / temperature, -1)
                start = len(seg["prompt_ids"])
                positions = [start + k for k, m in enumerate(seg["response_mask"]) if m]
                recorded += seg["sampled_logprobs"]
                recomputed += [float(logp[at - 1, ids[at]]) for at in positions]
    return recorded, recomputed, statuses


@pytest.mark.model
def test_one_grpo_step_of_each_framework_keeps_the_policys_own_tokens(tmp_path, monkeypatch):
    """The embedded model samples every call of each framework's agent for one GRPO step, through
    `aworld-train run`'s own path; each sampled token's recorded logprob is the model's own at that
    id (float32: rounding alone separates them), and the episodes end for their own reasons."""
    monkeypatch.setenv("AWORLD_TRAIN_DTYPE", "float32")
    model = load_model("embedded:smollm2-135m", dtype=torch.float32)
    for framework in FRAMEWORKS:
        run = tmp_path / framework
        overrides = [
            f"agent={EXAMPLE / 'process_agents.py'}:{framework}",
            "trainer.steps=1",
            "algorithm.group_size=2",
            "data.batch_size=2",
            "trainer.eval_before=false",
            "trainer.eval_after=false",
            "trainer.save_every=0",
            f"trainer.run_dir={run}",
        ]
        config = load_config(EXAMPLE / "grpo_local.yaml", overrides)
        summary = AgentTrainer(config=config).train()
        assert summary["steps"] == 1, framework
        recorded, recomputed, statuses = recorded_and_recomputed(model, run, config.rollout.temperature)
        assert len(statuses) == 4 and set(statuses) <= OWN_ENDINGS, (framework, statuses)
        assert recorded, framework
        worst = max(abs(a - b) for a, b in zip(recorded, recomputed, strict=True))
        print(
            f"{framework}: statuses {sorted(statuses)}, {len(recorded)} sampled tokens, worst gap {worst:.1e}"
        )
        assert worst < 1e-3, (framework, worst)
