"""AWorld's multi-agent swarms run and train: a planner and a calculator-using solver, as a
workflow, a team, a handoff pair and a hybrid, through AWorld's own runtime against the real
calculator MCP server, with a scripted policy. Every agent keeps its own token ledger."""

from __future__ import annotations

import json

import pytest
import yaml
from fake_completions_server import serve_json

from aworld_train.agents.calculator import mcp_config
from aworld_train.aworld.framework import SWARM_CLASSES, Agent, AgentConfig
from aworld_train.aworld.specs import load_agent_spec
from aworld_train.aworld.swarm_spec import SwarmSpec
from aworld_train.core.errors import AgentSpecError, ConfigError
from aworld_train.engines.local.samples import build_samples
from aworld_train.inputs.reward import RewardFunction
from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import Task, Trajectory
from aworld_train.rollout.policies.client import ScriptedPolicy
from aworld_train.rollout.tokens.ledger import Segment
from aworld_train.rollout.tokens.templates.renderer import content_text

REWARD = RewardFunction.load("aworld_train.rewards.calculator:exact_answer")
PLANNER, SOLVER = "You plan.", "You compute with the calculator."


def agents(url: str) -> tuple[Agent, Agent]:
    conf = AgentConfig(llm_provider="aworld_train")
    planner = Agent(name="planner", desc="Plans the calculation", system_prompt=PLANNER, conf=conf)
    solver = Agent(
        name="solver",
        desc="Computes an expression with the calculator",
        system_prompt=SOLVER,
        mcp_config=mcp_config(url),
        mcp_servers=["calculator"],
        conf=AgentConfig(llm_provider="aworld_train"),
    )
    return planner, solver


def swarm_of(kind: str, url: str):
    planner, solver = agents(url)
    if kind == "handoff":
        return SWARM_CLASSES[kind]((planner, solver))
    return SWARM_CLASSES[kind](planner, solver)


def call(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


class TeamScript:
    """Replies as the agent whose system prompt opens the prompt; records who was asked."""

    def __init__(self, tokenizer, kind: str) -> None:
        self.tokenizer, self.kind, self.callers = tokenizer, kind, []

    def __call__(self, prompt_ids: list[int]) -> str:
        text = self.tokenizer.decode(prompt_ids)
        who = "planner" if PLANNER in text else "solver"
        self.callers.append(who)
        answered = "<tool_response>" in text
        if who == "planner":
            if self.kind == "workflow":
                return "Compute 37 * 48."
            return "The answer is 1776." if answered else call("solver", {"content": "compute 37 * 48"})
        return "The answer is 1776." if answered else call("calculate", {"expression": "37 * 48"})


@pytest.mark.parametrize("kind", ["workflow", "team", "handoff", "hybrid"])
async def test_every_agent_of_a_swarm_keeps_its_own_exact_ledger(
    kind, calculator_server, tokenizer, im_end, make_runtime
):
    spec = load_agent_spec(swarm_of(kind, calculator_server.url))
    assert isinstance(spec, SwarmSpec) and spec.kind == kind
    script = TeamScript(tokenizer, kind)
    policy = ScriptedPolicy(tokenizer, script, im_end)
    task = Task("t", ["What is 37 * 48?"], ground_truth=1776)
    traj = await Episode(spec, task, make_runtime(policy), REWARD).run()
    assert traj.status == "ok", traj.error
    assert traj.reward == 1.0 and traj.final_answer == "The answer is 1776."
    by_agent = {name: [s for s in traj.segments if s.agent == name] for name in ("planner", "solver")}
    assert all(len(segments) == 1 for segments in by_agent.values()), [s.agent for s in traj.segments]
    for name, (segment,) in by_agent.items():
        calls = [i for i, who in enumerate(script.callers) if who == name]
        # mask-1 tokens are exactly what the policy sampled for this agent, in order
        sampled = [t for t, m in zip(segment.response_ids, segment.response_mask, strict=True) if m]
        assert sampled == [t for i in calls for t in policy.generations[i].token_ids]
        # and every prompt of this agent was its own ledger, never another agent's
        for i in calls:
            assert segment.ids[: len(policy.prompts[i])] == policy.prompts[i]
        system = PLANNER if name == "planner" else SOLVER
        assert system in tokenizer.decode(segment.prompt_ids)
    made = [(c.agent, c.name, c.result) for c in traj.tool_calls]
    assert ("solver", "calculate", "1776") in made
    if kind != "workflow":  # the planner called the solver as its tool, under the solver's name
        assert ("planner", "solver", "The answer is 1776.") in made


def test_a_swarm_spec_round_trips_through_yaml_with_secrets_as_references(
    calculator_server, tmp_path, monkeypatch
):
    monkeypatch.setenv("CALC_TOKEN", "s3cret-value")
    planner, solver = agents(calculator_server.url)
    solver.mcp_config["mcpServers"]["calculator"]["headers"] = {"Authorization": "Bearer s3cret-value"}
    spec = load_agent_spec(SWARM_CLASSES["team"](planner, solver, max_steps=7))
    path = spec.write(tmp_path / "agent_spec.yaml")
    assert "s3cret-value" not in path.read_text() and "${CALC_TOKEN}" in path.read_text()
    again = load_agent_spec(str(path))
    assert again == spec
    assert [role.name for role in again.roles()] == ["planner", "solver"]
    assert again.roles()[1].mcp_servers == ["calculator"] and again.max_steps == 7
    assert again.mcp_servers == ["calculator"]


def test_a_swarm_that_cannot_be_rebuilt_is_refused_with_the_reason(calculator_server):
    planner, solver = agents(calculator_server.url)
    inner = SWARM_CLASSES["workflow"](solver)
    with pytest.raises(AgentSpecError, match="nested swarm"):
        load_agent_spec(SWARM_CLASSES["workflow"](planner, inner))

    class MyAgent(Agent):
        pass

    custom = MyAgent(name="mine", system_prompt="x", conf=AgentConfig(llm_provider="aworld_train"))
    with pytest.raises(AgentSpecError, match="its own code would be lost"):
        load_agent_spec(SWARM_CLASSES["workflow"](planner, custom))
    with pytest.raises(AgentSpecError, match="agent 'mine' is a .*MyAgent.*its own code would be lost"):
        load_agent_spec(custom)  # alone, too
    twin = Agent(name="planner", system_prompt="another", conf=AgentConfig(llm_provider="aworld_train"))
    with pytest.raises(AgentSpecError, match="two different agents named 'planner'"):
        load_agent_spec(SWARM_CLASSES["workflow"](planner, twin))


def test_a_swarm_yaml_with_an_unknown_agent_in_its_topology_names_it(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text(
        yaml.safe_dump({"name": "t", "kind": "workflow", "agents": [{"name": "a"}], "topology": ["a", "b"]})
    )
    with pytest.raises(AgentSpecError, match="topology names b, not among the agents a"):
        load_agent_spec(str(path))


def _two_agent_episode(task: str, rewards: dict[str, float], reward: float = 0.5) -> Trajectory:
    segments = [
        Segment([1, 2], [3, 4], [1, 1], [-0.1, -0.2], agent="planner"),
        Segment([5, 6], [7, 8, 9], [1, 0, 1], [-0.3, 0.0, -0.4], agent="solver"),
    ]
    return Trajectory(
        "e", task, segments=segments, reward=reward, reward_extras={"agent_rewards": rewards}, num_turns=2
    )


def test_grpo_compares_each_agent_with_the_same_agent_of_the_task():
    """Per-agent rewards: the planner's advantage comes from the planners' rewards only."""
    trajs = [
        _two_agent_episode("t", {"planner": 1.0, "solver": 0.0}),
        _two_agent_episode("t", {"planner": 0.0, "solver": 0.0}),
    ]
    samples, _ = build_samples(trajs, ["g", "g"])
    by_agent = {}
    for sample in samples:
        agent = "planner" if sample.ids[:2] == [1, 2] else "solver"
        by_agent.setdefault(agent, []).append(sample.advantage)
    assert by_agent["planner"][0] > 0 > by_agent["planner"][1]
    assert by_agent["solver"] == [0.0, 0.0]  # equal solver rewards: nothing to learn for it


def test_a_frozen_agent_gives_no_sample():
    trajs = [_two_agent_episode("t", {}, 1.0), _two_agent_episode("t", {}, 0.0)]
    samples, advantages = build_samples(trajs, ["g", "g"], frozen_agents=["planner"])
    assert [s.ids[:2] for s in samples] == [[5, 6], [5, 6]]
    assert advantages[0] > 0 > advantages[1]


TEAM = "aworld_train.agents.calculator_team:build_team"


def make_trainer(**config):
    from aworld_train import AgentTrainer

    rows = [{"prompt": "What is 1 + 1?", "ground_truth": 2}]
    return AgentTrainer(
        agent=TEAM,
        config={"env": [{"name": "calculator"}], **config},
        reward_func="aworld_train.rewards.calculator:exact_answer",
        train_dataset=rows,
        test_dataset=rows,
    )


def test_the_trainer_takes_a_swarm_factory_and_checks_the_frozen_agents():
    trainer = make_trainer(rollout={"frozen_agents": ["coordinator"]})
    assert isinstance(trainer.spec, SwarmSpec) and trainer.spec.kind == "team"
    assert [role.name for role in trainer.spec.roles()] == ["coordinator", "calculator_agent"]
    with pytest.raises(
        ConfigError, match=r"rollout.frozen_agents names 'coordinater'.*did you mean 'coordinator'"
    ):
        make_trainer(rollout={"frozen_agents": ["coordinater"]})
    with pytest.raises(
        ConfigError, match=r"rollout.agent_endpoints.coordinator.api_key uses \$\{NO_SUCH_KEY_SET\}"
    ):
        make_trainer(
            rollout={
                "agent_endpoints": {
                    "coordinator": {
                        "base_url": "http://127.0.0.1:1/v1",
                        "model": "m",
                        "api_key": "${NO_SUCH_KEY_SET}",
                    }
                }
            }
        )
    with pytest.raises(ConfigError, match=r"api_key.*\$\{ENV_VAR\} reference"):
        make_trainer(
            rollout={
                "agent_endpoints": {
                    "coordinator": {"base_url": "http://h/v1", "model": "m", "api_key": "sk-literal"}
                }
            }
        )
    with pytest.raises(ConfigError, match="leave no agent of 'calculator_team' to train"):
        make_trainer(rollout={"frozen_agents": ["coordinator", "calculator_agent"]})


def test_the_team_example_config_is_accepted(monkeypatch):
    from pathlib import Path

    from aworld_train import AgentTrainer

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    trainer = AgentTrainer(config="examples/calculator_team/grpo_local.yaml")
    assert trainer.spec.kind == "workflow"
    assert [role.name for role in trainer.spec.roles()] == ["planner", "calculator_agent"]
    assert len(trainer.train_tasks) == 200 and len(trainer.test_tasks) == 50


@pytest.mark.parametrize("kind", ["workflow", "team"])
async def test_a_second_user_turn_continues_every_agents_ledger(
    kind, calculator_server, tokenizer, im_end, make_runtime
):
    spec = load_agent_spec(swarm_of(kind, calculator_server.url))
    policy = ScriptedPolicy(tokenizer, TeamScript(tokenizer, kind), im_end)
    task = Task("t", ["What is 37 * 48?", "What is 37 * 48, once more?"], ground_truth=1776)
    traj = await Episode(spec, task, make_runtime(policy), REWARD).run()
    assert traj.status == "ok", traj.error
    assert traj.user_turns == 2
    # one segment per agent: the second turn extended each agent's history, never re-rendered it
    assert sorted(s.agent for s in traj.segments) == ["planner", "solver"]
    planner = next(s for s in traj.segments if s.agent == "planner")
    assert tokenizer.decode(planner.ids).count("What is 37 * 48") == 2


class FakeChatServer:
    """`POST /v1/chat/completions` in OpenAI's shape on 127.0.0.1: the coordinator of a team that
    calls the solver as its tool, then answers with the solver's answer. Every request body is kept."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.httpd, self.url = serve_json(self.answer)

    def answer(self, path: str, body: dict) -> tuple[int, dict]:
        self.bodies.append(body)
        answered = [m for m in body["messages"] if m["role"] == "tool"]
        call = {"name": "solver", "arguments": json.dumps({"content": "37 * 48"})}
        message = (
            {"role": "assistant", "content": content_text(answered[-1]["content"])}
            if answered
            else {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "call_1", "type": "function", "function": call}],
            }
        )
        return 200, {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


async def test_an_agent_served_by_another_endpoint_calls_its_team_and_trains_nothing(
    calculator_server, tokenizer, im_end, make_runtime, monkeypatch
):
    monkeypatch.setenv("PLANNER_KEY", "k-123456")
    chat = FakeChatServer()
    try:
        spec = load_agent_spec(swarm_of("team", calculator_server.url))
        script = TeamScript(tokenizer, "team")
        policy = ScriptedPolicy(tokenizer, script, im_end)
        endpoint = {"base_url": chat.url, "model": "big-planner", "api_key": "${PLANNER_KEY}"}
        runtime = make_runtime(policy, agent_endpoints={"planner": endpoint})
        traj = await Episode(spec, Task("t", ["What is 37 * 48?"], ground_truth=1776), runtime, REWARD).run()
    finally:
        chat.stop()
    assert traj.status == "ok", traj.error
    assert traj.reward == 1.0 and traj.final_answer == "The answer is 1776."  # the solver's, passed on
    # the planner's two calls went to its endpoint, with its own system prompt and the solver as a tool
    assert len(chat.bodies) == 2 and chat.bodies[0]["model"] == "big-planner"
    assert chat.bodies[0]["messages"][0] == {"role": "system", "content": PLANNER}
    assert [t["function"]["name"] for t in chat.bodies[0]["tools"]] == ["solver"]
    # only the solver asked the policy; only it has a ledger
    assert set(script.callers) == {"solver"} and [s.agent for s in traj.segments] == ["solver"]
    made = [(c.agent, c.name, c.result) for c in traj.tool_calls]
    assert ("planner", "solver", "The answer is 1776.") in made and ("solver", "calculate", "1776") in made


def test_two_agents_with_one_server_name_but_other_settings_are_refused(calculator_server):
    planner, solver = agents(calculator_server.url)
    planner.mcp_config = mcp_config("http://127.0.0.1:1/mcp")
    planner.mcp_servers = ["calculator"]
    with pytest.raises(
        AgentSpecError, match="two agents name MCP server 'calculator' with different settings"
    ):
        load_agent_spec(SWARM_CLASSES["workflow"](planner, solver))
