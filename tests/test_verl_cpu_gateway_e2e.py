"""An agent in a process of its own, trained by verl's own trainer through the gateway, end to end
on a CPU: `aworld-train run` on examples/calculator/grpo_verl_cpu.yaml with the calculator agent of
examples/calculator_gateway/aworld_agent.py (AWorld's runner and stock `openai` provider, no
aworld-train code) for 2 GRPO steps. Each verl agent-loop worker starts the agent process and a
gateway; the agent's calls reach verl's own server client through its episode's session. One run,
a few minutes on 2 cores, hence `slow`; it runs after the suite (tests/early_runs.py).
"""

from __future__ import annotations

from pathlib import Path

import early_runs
import pytest
import yaml
from verl_cpu_support import ROOT, calculator_rows, launch_cpu_run

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]


def start_run(tmp: Path) -> early_runs.Started:
    return launch_cpu_run(
        tmp, calculator_rows(4), f"agent={ROOT / 'examples/calculator_gateway/agents.py'}:aworld_agent"
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return early_runs.result(__name__, start_run, tmp_path_factory.mktemp("verl_cpu_gateway"))


def test_main_ppo_trains_an_agent_running_in_its_own_process(run):
    assert run["rc"] == 0, run["log"][-4000:]
    assert sorted(run["steps"]) == [1, 2]
    spec = yaml.safe_load((run["run_dir"] / "verl/agent_spec.yaml").read_text())  # what every worker read
    assert spec["command"][-1].endswith("examples/calculator_gateway/aworld_agent.py")
    for step, metrics in run["steps"].items():
        assert metrics["actor/grad_norm"] > 0, step
        assert metrics["training/aworld/trained"] == 4, step  # batch 2 x group 2, all through the gateway
        assert metrics["training/aworld/history_rewrites/mean"] == 0, step
        # verl's recompute of every output matches the logprobs its server sampled: token-exact
        assert metrics["training/rollout_probs_diff_max"] < 1e-3, step
