"""verl's own CPU trainer on a Ray cluster of two nodes, each in its own network namespace (so that
127.0.0.1 differs between them: tests/ray_two_nodes.py): `aworld-train run` joins the cluster
through RAY_ADDRESS from the head's namespace, with two agent-loop workers, which verl places one
per node. The calculator server the config lists under `env:` must answer episodes on both nodes.

The worker on the second node finds the launching node's loopback URL dead and starts the server
on its own node: both servers' logs show the episodes' MCP requests, and every episode trains. (A
second node's server log with requests in it is itself the proof that the nodes' loopbacks differ:
with one launcher-side server only, `per_node: false`, that node's episodes end
`tool_server_down`.)

One run of a few minutes on 2 cores, hence `slow`; it runs after the suite (tests/early_runs.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray_two_nodes
from verl_cpu_support import calculator_rows, cpu_run, parse_steps

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

why_not = ray_two_nodes.available()
if why_not is not None:
    pytest.skip(f"two namespaced Ray nodes cannot run here: {why_not}", allow_module_level=True)

LISTED = "ListToolsRequest"  # what the calculator server logs at INFO when an episode's agent lists its tools


def run_on(cluster: ray_two_nodes.Cluster, tmp: Path, *overrides: str) -> dict:
    command, run_dir, _ = cpu_run(
        sys.executable,
        "examples/calculator/grpo_verl_cpu.yaml",
        tmp,
        calculator_rows(4),
        "rollout.workers=2",  # verl places agent-loop workers round-robin over the nodes
        *overrides,
    )
    env = {**os.environ, **ray_two_nodes.ENV, "RAY_ADDRESS": cluster.address, "FASTMCP_LOG_LEVEL": "INFO"}
    done = subprocess.run(
        cluster.run_in_head(command), cwd=tmp, env=env, capture_output=True, text=True, timeout=1100
    )
    log = done.stdout + done.stderr
    return {"rc": done.returncode, "log": log, "steps": parse_steps(log), "run_dir": run_dir}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ray_two_nodes")
    cluster = ray_two_nodes.start(node_env={"FASTMCP_LOG_LEVEL": "INFO"})
    try:
        return run_on(cluster, tmp / "per_node")
    finally:
        cluster.stop()


def server_logs(run_dir: Path) -> dict[str, str]:
    return {
        path.name: path.read_text(errors="replace") for path in sorted(run_dir.glob("env-calculator*.log"))
    }


def test_episodes_on_both_nodes_reach_a_calculator_server_on_their_own_node(run):
    assert run["rc"] == 0, run["log"][-4000:]
    assert sorted(run["steps"]) == [1, 2]
    logs = server_logs(run["run_dir"])
    # the launching node's server (env-calculator.log) and the second node's, started there
    assert set(logs) == {"env-calculator.log", f"env-calculator-node-{ray_two_nodes.NODE_IP}.log"}, logs
    for name, text in logs.items():
        # batch 2 x group 2, split over the two workers: 2 episodes a step on each node
        assert text.count(LISTED) >= 2 * len(run["steps"]), (name, text[-2000:])
    for step, metrics in run["steps"].items():
        assert metrics["training/aworld/status/tool_server_down"] == 0, step
        assert metrics["training/aworld/trained"] == 4, step
        assert metrics["actor/grad_norm"] > 0, step
