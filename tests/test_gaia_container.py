"""The GAIA gateway in real Docker: `env/gaia/run-local.sh` creates `.env` from its template,
builds the image (on a base built from Debian's packages where Docker Hub cannot be reached,
with the host's CA bundle for pip), starts the container, waits for /health and prints the MCP
config; the project's GAIA agent then runs the sample's episodes from this machine through the
container (documents from the mounted dataset, python in the container's sandbox, the
calculator); the sandbox holds inside the container; `docker compose down` leaves nothing.
One container for the module; a few minutes with the image build."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import httpx
import pytest
from docker_support import ROOT, project_resources, require_engine
from gaia_container_support import started_container
from gaia_support import SAMPLE, TOKEN, call_tool, scripted_gaia_model, text_of

pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def container(tmp_path_factory):
    require_engine()
    with started_container(tmp_path_factory.mktemp("gaia-container")) as box:
        yield box


def test_run_local_creates_the_env_file_builds_starts_and_prints_the_mcp_config(container):
    out = container.output
    assert "created env/gaia/.env from .env_template" in out
    assert "Start mcp server success" in out and '"status":"ok"' in out
    config = json.loads(out[out.index('{"mcpServers"') :])
    gateway = config["mcpServers"]["aworld-mcp"]
    assert gateway["url"] == container.url
    assert gateway["headers"]["MCP_SERVERS"] == "documents,python,calculator,search"
    assert gateway["headers"]["Authorization"] == "Bearer ${GAIA_GATEWAY_TOKEN}"  # a reference, not the token
    assert TOKEN not in out


def test_the_compose_files_limits_are_in_force(container):
    state = container.inspect()
    host = state["HostConfig"]
    assert host["Memory"] == 3 * 1024**3
    assert host["CapDrop"] == ["ALL"] and set(host["CapAdd"]) <= {
        "CAP_SETUID", "CAP_SETGID", "CAP_CHOWN", "CAP_FOWNER", "CAP_DAC_OVERRIDE", "CAP_KILL",
        "SETUID", "SETGID", "CHOWN", "FOWNER", "DAC_OVERRIDE", "KILL",
    }  # fmt: skip
    bindings = [b for ports in host["PortBindings"].values() for b in ports]
    assert bindings == [{"HostIp": "127.0.0.1", "HostPort": str(container.port)}]
    assert host["Init"] is True
    mounts = {m["Destination"]: m for m in state["Mounts"]}
    assert mounts["/data/gaia"]["Source"] == str(SAMPLE) and mounts["/data/gaia"]["RW"] is False
    # the gateway is not reachable without its token
    assert httpx.post(container.url, json={}, timeout=10).status_code == 401


async def test_the_gaia_agent_runs_episodes_through_the_container(container, tokenizer, im_end, make_runner):
    from aworld_train.agents.gaia import build_agent
    from aworld_train.aworld.specs import load_agent_spec
    from aworld_train.env.gaia.data import load_gaia
    from aworld_train.evaluation.report import evaluate
    from aworld_train.inputs.dataset import load_tasks
    from aworld_train.inputs.reward import RewardFunction
    from aworld_train.rollout.policies.client import ScriptedPolicy
    from aworld_train.rollout.policies.router import PolicyRouter

    spec = load_agent_spec(build_agent(url=container.url, servers=["documents", "python", "calculator"],
                                       authorization=TOKEN))  # fmt: skip
    tasks = load_tasks(load_gaia(SAMPLE))
    runner = make_runner(spec, RewardFunction.load("aworld_train.rewards.gaia:gaia_reward"), max_assistant_turns=4,
                         max_new_tokens=256, episode_timeout_s=120)  # fmt: skip
    policy = ScriptedPolicy(tokenizer, scripted_gaia_model(tokenizer), im_end)
    report = await evaluate(runner, PolicyRouter(policy), tasks, show_progress=False)
    assert [t.status for t in report.trajectories] == ["ok"] * 10
    assert report.summary()["accuracy"] == pytest.approx(0.9)  # the sample's one wrong reading
    tools = {t.tool_calls[0].name for t in report.trajectories}
    assert tools == {"read_document", "run_python", "calculate"}
    # read from the dataset mounted into the container
    assert any("48500 euros" in t.tool_calls[0].result for t in report.trajectories)
    health = httpx.get(f"http://127.0.0.1:{container.port}/health", timeout=10).json()
    assert health["sessions"] == 0 and health["episodes"] == 0
    mode = re.search(r"python sandbox: (\w+)", container.python_log())
    assert mode and mode.group(1) in ("bwrap", "uid"), container.python_log()[-2000:]


def python(container, episode: str, code: str) -> str:
    return text_of(
        asyncio.run(call_tool(container.url, "run_python", {"code": code}, episode=episode, servers="python"))
    )


def test_one_episode_cannot_read_anothers_files(container):
    python(container, "episode-a", "open('secret.txt', 'w').write('from a')")
    assert "from a" in python(container, "episode-a", "print(open('secret.txt').read())")
    probe = """
import glob, os
print('glob', glob.glob('../*/*'), glob.glob('/var/lib/gaia-gateway/**/secret.txt', recursive=True))
try:
    print('list', os.listdir('..'))
except OSError as exc:
    print('denied', type(exc).__name__)
"""
    out = python(container, "episode-b", probe)
    assert "from a" not in out and "secret.txt" not in out, out


def test_code_reaches_no_network(container):
    probe = """
import socket
for host, port in (('gateway', 8080), ('127.0.0.1', 8080), ('pypi.org', 443), ('172.17.0.1', 22)):
    try:
        socket.create_connection((host, port), timeout=3)
        print('reached', host)
    except OSError as exc:
        print('blocked', host, type(exc).__name__)
"""
    out = python(container, "episode-net", probe)
    assert "reached" not in out, out


def test_no_process_outlives_its_call(container):
    probe = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(2)
        open('daemon-was-here', 'w').write('x')
        os._exit(0)
    os._exit(0)
print('parent done')
"""
    assert "parent done" in python(container, "episode-daemon", probe)
    time.sleep(3)
    assert "False" in python(
        container, "episode-daemon", "import os; print(os.path.exists('daemon-was-here'))"
    )


def test_forks_and_disk_are_bounded(container):
    fork = """
import os, time
children = 0
try:
    for _ in range(500):
        if os.fork() == 0:
            time.sleep(3)
            os._exit(0)
        children += 1
except OSError as exc:
    print('stopped after', children)
"""
    out = python(container, "episode-fork", fork)
    assert "stopped after" in out, out
    disk = "chunk = b'x' * 2**20\nwith open('big.bin', 'wb') as f:\n    for _ in range(4096):\n        f.write(chunk)"
    out = python(container, "episode-disk", disk)
    assert "disk quota" in out or "File size limit" in out or "exit code" in out, out
    size = python(
        container, "episode-disk", "import os; print(sum(os.path.getsize(f) for f in os.listdir('.')))"
    )
    assert int(size.strip().splitlines()[-1]) <= 256 * 2**20  # GAIA_PYTHON_DISK_MB's default


GAIA_EXAMPLE = ROOT / "examples/train_gaia_with_aworld_verl/grpo_trainer.yaml"
# verl's CPU switch for the GAIA example, whose GPU values (vLLM, 8 GPUs, 4 agent-loop workers) a
# CPU run must replace: the values a user gives win, so they are given here too
CPU_SWITCH = [
    "verl.trainer.device=cpu",
    "verl.trainer.n_gpus_per_node=1",
    "verl.actor_rollout_ref.rollout.name=aworld_cpu",
    "verl.actor_rollout_ref.rollout.agent.num_workers=1",
    "verl.actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "verl.actor_rollout_ref.actor.optim.weight_decay=0.0",
]
TOOLS = ["documents", "python", "calculator"]


def calls_in_container(container) -> list[dict]:
    text = container.compose("exec", "-T", "gateway", "cat", "/var/lib/gaia-gateway/logs/calls.jsonl").stdout
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def gaia_trainer(container, model: Path, run_dir: Path):
    """AgentTrainer(agent=the GAIA agent on the container's tools, config=the GAIA example with verl's
    CPU switch, reward_func, train_dataset=the GAIA sample): 2 GRPO steps of `model`."""
    from aworld_train import AgentTrainer
    from aworld_train.agents.gaia import build_agent
    from aworld_train.env.gaia.data import load_gaia

    return AgentTrainer(
        agent=build_agent(url=container.url, servers=TOOLS, authorization=TOKEN),
        config=str(GAIA_EXAMPLE),
        reward_func=f"{ROOT / 'tests/gaia_mission.py'}:tool_results",
        train_dataset=load_gaia(SAMPLE),
        overrides=[
            *CPU_SWITCH,
            f"model={model}",
            "env=[]",  # the container serves the tools; the run starts no gateway of its own
            "algorithm.group_size=2",
            "algorithm.lr=1.0e-4",
            "data.batch_size=2",
            "rollout.max_assistant_turns=2",
            "rollout.max_new_tokens=48",
            # the taught call's shape is near certain at this temperature; its digits stay a toss-up
            "rollout.temperature=0.3",
            "rollout.max_response_tokens=512",
            "rollout.episode_timeout_s=300",
            "trainer.steps=2",
            "trainer.eval_every=0",
            "trainer.eval_before=false",
            "trainer.eval_after=false",  # the container's calls are the training episodes' alone
            "trainer.save_every=2",
            f"trainer.run_dir={run_dir}",
        ],
    )


def teach_the_call_through_the_container(trainer, model: Path) -> float:
    """The agent's own prompts, through the container, teach the random model the call's shape: the
    teaching's last step's loss (tests/gaia_mission.py)."""
    from gaia_mission import call_text, teach_tool_calls

    from aworld_train.rollout.episodes.batch import run_episodes
    from aworld_train.rollout.episodes.runtime import RolloutRuntime
    from aworld_train.rollout.policies.client import ScriptedPolicy
    from aworld_train.rollout.policies.models import load_tokenizer
    from aworld_train.rollout.policies.router import PolicyRouter
    from aworld_train.rollout.tokens.templates.renderer import ChatRenderer
    from aworld_train.rollout.tokens.turns.stops import stop_token_ids

    tokenizer = load_tokenizer(str(model))
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    policy = ScriptedPolicy(tokenizer, lambda _: call_text(2, 3), end)
    rollout = trainer.config.rollout
    renderer = ChatRenderer(
        tokenizer, tool_block=rollout.tool_block, template_kwargs=rollout.chat_template_kwargs
    )
    runtime = RolloutRuntime(PolicyRouter(policy), renderer, stop_token_ids(tokenizer), rollout)
    asyncio.run(run_episodes(trainer.spec, list(trainer.train_tasks), runtime))
    return teach_tool_calls(model, policy.prompts, tokenizer)


def weight_changes(run_dir: Path, model: Path) -> list[float]:
    """Per weight the actor saved at step 2, its largest change from the taught model's."""
    import torch
    from safetensors.torch import load_file

    shard = run_dir / "checkpoints/global_step_2/actor/model_world_size_1_rank_0.pt"
    trained = torch.load(shard, weights_only=False, map_location="cpu")
    initial = load_file(model / "model.safetensors")  # as taught, before GRPO
    return [
        float(((t.to_local() if hasattr(t, "to_local") else t).float() - initial[name].float()).abs().max())
        for name, t in trained.items()
        if name in initial
    ]


@pytest.mark.slow
def test_verl_trains_the_gaia_agent_against_the_container(container, tmp_path):
    """The card's sentence, end to end on this CPU: AgentTrainer(agent=the GAIA agent, config=the
    GAIA example with verl's CPU switch, reward_func, train_dataset=the GAIA sample).train() runs
    verl's own main_ppo for 2 GRPO steps whose episodes call their tools in the container."""
    pytest.importorskip("verl")
    from gaia_mission import tiny_model
    from verl_cpu_support import parse_steps

    model = tiny_model(tmp_path / "tiny")
    run_dir = tmp_path / "run"
    trainer = gaia_trainer(container, model, run_dir)
    assert teach_the_call_through_the_container(trainer, model) < 0.5
    before = len(calls_in_container(container))

    summary = trainer.train()

    assert summary["returncode"] == 0
    log = Path(summary["log"]).read_text()
    steps = parse_steps(log)
    assert sorted(steps) == [1, 2]
    # a step has a gradient exactly when some group's rewards differ (the calculator's digits are
    # a toss-up, so both samples of each group may tie); the run as a whole learned something
    for m in steps.values():
        untied = m["critic/advantages/max"] - m["critic/advantages/min"] > 1e-6
        assert (m["actor/grad_norm"] > 0) == untied, m
    assert any(m["actor/grad_norm"] > 0 for m in steps.values())
    # 2 tasks x 2 samples a step, and a fresh task for a group none of whose episodes trains
    # (the taught model still writes a malformed call now and then)
    assert all(
        m["training/aworld/episodes"] >= 4 and m["training/aworld/trained"] >= 1 for m in steps.values()
    )
    # the episodes' tool calls reached the container, and each was answered
    calls = calls_in_container(container)[before:]
    episodes = {c["episode"] for c in calls}
    ran = sum(m["training/aworld/episodes"] for m in steps.values())
    assert 1 <= len(episodes) <= ran and all(c["ok"] and c["tool"] == "calculate" for c in calls), calls
    # the actor's weights moved (weight decay 0: by gradient steps only)
    moved = weight_changes(run_dir, model)
    assert len(moved) >= 10 and max(moved) > 0


def test_compose_down_leaves_no_container_network_or_volume(container):
    assert project_resources(container.project)["containers"]  # running now
    container.compose("down", "--volumes", "--timeout", "10")
    assert project_resources(container.project) == {"containers": [], "networks": [], "volumes": []}
