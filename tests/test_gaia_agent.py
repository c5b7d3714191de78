"""The GAIA agent end to end: AWorld agent, real gateway and tool servers, scripted policy, GAIA scorer."""

import json

import httpx
import pytest
from gaia_support import SAMPLE, TOKEN, scripted_gaia_model, standard_servers, start_gateway

from aworld_train.agents.gaia_client import get_agent_tool_env_and_servers
from aworld_train.aworld.specs import load_agent_spec
from aworld_train.core.errors import DatasetError
from aworld_train.env.gaia.data import load_gaia
from aworld_train.evaluation.report import evaluate
from aworld_train.inputs.reward import RewardFunction
from aworld_train.rollout.policies.client import ScriptedPolicy
from aworld_train.rollout.policies.router import PolicyRouter


def _render(trainer):
    """The engine's run folder, written through the facade as `aworld-train render` does."""
    return trainer.render()


def test_tool_env_has_the_shape_agents_expect(monkeypatch):
    monkeypatch.delenv("MCP_SERVER_URL", raising=False)
    config, servers = get_agent_tool_env_and_servers()
    gateway = config["mcpServers"]["aworld-mcp"]
    assert gateway["type"] == "streamable-http"
    assert gateway["url"] == "${GAIA_MCP_URL:-http://127.0.0.1:8080/mcp}"
    assert gateway["headers"] == {"MCP_SERVERS": ",".join(servers)}
    assert (
        gateway["timeout"] == gateway["sse_read_timeout"] == gateway["client_session_timeout_seconds"] == 600
    )
    assert servers == ["documents", "python", "calculator", "search"]

    monkeypatch.setenv("MCP_SERVER_URL", "http://10.0.0.5:8080/mcp")
    config, servers = get_agent_tool_env_and_servers(servers=["python"], authorization="s3cret-token")
    gateway = config["mcpServers"]["aworld-mcp"]
    assert gateway["url"] == "http://10.0.0.5:8080/mcp" and servers == ["python"]
    assert gateway["headers"] == {"MCP_SERVERS": "python", "Authorization": "${MCP_SERVER_AUTHORIZATION}"}
    assert "s3cret-token" not in json.dumps(config)


def test_gaia_metadata_becomes_rows_and_names_missing_attachments(tmp_path):
    rows = load_gaia(SAMPLE)
    assert len(rows) == 10 and {r["level"] for r in rows} == {1, 2}
    pdf = next(r for r in rows if r["file_name"] == "minutes.pdf")
    assert pdf["prompt"].endswith("Attached file: minutes.pdf") and pdf["ground_truth"] == "48500"
    assert all(r["data_source"] == "gaia" for r in rows)
    assert len(load_gaia(SAMPLE / "metadata.jsonl", levels=[2])) == 5

    broken = tmp_path / "validation"
    broken.mkdir()
    (broken / "metadata.jsonl").write_text(
        json.dumps({"task_id": "t1", "Question": "q", "Final answer": "1", "file_name": "gone.pdf"}) + "\n"
    )
    with pytest.raises(DatasetError, match="attaches 'gone.pdf'"):
        load_gaia(broken)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    server = start_gateway(tmp_path_factory.mktemp("gaia-eval"), standard_servers())
    yield server
    server.stop()


async def test_gaia_agent_evaluates_through_the_real_gateway(gateway, tokenizer, im_end, make_runner):
    from aworld_train.agents.gaia import build_agent
    from aworld_train.inputs.dataset import load_tasks

    spec = load_agent_spec(build_agent(url=gateway.url, servers=["documents", "python", "calculator"],
                                       authorization=TOKEN))  # fmt: skip
    assert TOKEN not in spec.to_yaml()
    tasks = load_tasks(load_gaia(SAMPLE))
    policy = ScriptedPolicy(tokenizer, scripted_gaia_model(tokenizer), im_end)
    runner = make_runner(spec, RewardFunction.load("aworld_train.rewards.gaia:gaia_reward"), max_assistant_turns=4,
                         max_new_tokens=256, episode_timeout_s=120)  # fmt: skip
    report = await evaluate(runner, PolicyRouter(policy), tasks, show_progress=False)

    questions = {task.id: task.user_turns[0].split("?")[0] for task in tasks}
    by_question = {questions[t.task_id]: t for t in report.trajectories}
    assert [t.status for t in report.trajectories] == ["ok"] * 10
    assert all(len(t.tool_calls) == 1 and not t.tool_calls[0].error for t in report.trajectories)
    wrong = [q for q, t in by_question.items() if t.reward != 1.0]
    assert wrong == ["Which region has the highest total Amount in the attached spreadsheet"]
    assert report.summary()["accuracy"] == pytest.approx(0.9)
    # The tool outputs the agent saw came from the real servers behind the gateway.
    budget = next(t for q, t in by_question.items() if "budget" in q)
    assert "48500 euros" in budget.tool_calls[0].result
    # Each episode released its sessions when it ended (they would idle for 120 s otherwise),
    # and the python folders of those that ran code went with them.
    health = httpx.get(gateway.base + "/health", timeout=10).json()
    assert health["sessions"] == 0 and health["episodes"] == 0
    used_python = [t for t in report.trajectories if t.tool_calls[0].name == "run_python"]
    assert used_python and not [p for p in gateway.sandbox_root.glob("*/*") if p.is_dir()]


def test_the_gaia_example_renders_for_verl_on_cpu(tmp_path):
    from aworld_train.facade.trainer import AgentTrainer

    example = SAMPLE.parents[2]
    trainer = AgentTrainer(
        config=str(example / "grpo_trainer.yaml"), overrides=[f"trainer.run_dir={tmp_path}"]
    )
    run = _render(trainer)
    final = run.final
    assert final.reward.custom_reward_function.name == "gaia_reward"
    assert final.actor_rollout_ref.rollout.n == 8 and final.trainer.n_gpus_per_node == 8
    spec = (run.folder / "agent_spec.yaml").read_text()
    assert "${GAIA_MCP_URL:-http://127.0.0.1:8080/mcp}" in spec and "MCP_SERVERS: documents,python" in spec
    assert trainer.config.env[0].name == "gaia"
