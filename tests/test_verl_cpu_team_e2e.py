"""A two-agent AWorld swarm on verl's own trainer, end to end on a CPU: `aworld-train run` on
examples/calculator/grpo_verl_cpu.yaml with the calculator pipeline (a planner, then the
calculator agent: AWorld's WorkflowSwarm) as the agent, for 2 GRPO steps. Every agent's ledger
segment is one verl output; both agents' samples reach verl's batch in every step. One run, a few
minutes on 2 cores, hence `slow`; it runs after the suite (tests/early_runs.py).
"""

from __future__ import annotations

from pathlib import Path

import early_runs
import pytest
import yaml
from verl_cpu_support import calculator_rows, launch_cpu_run

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

AGENTS = ("planner", "calculator_agent")


def start_run(tmp: Path) -> early_runs.Started:
    return launch_cpu_run(
        tmp,
        calculator_rows(4),
        "agent=aworld_train.agents.calculator_team:build_pipeline",
        "rollout.max_assistant_turns=4",
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return early_runs.result(__name__, start_run, tmp_path_factory.mktemp("verl_cpu_team"))


def test_main_ppo_trains_both_agents_of_the_swarm_for_two_steps(run):
    assert run["rc"] == 0, run["log"][-4000:]
    assert sorted(run["steps"]) == [1, 2]
    spec = yaml.safe_load((run["run_dir"] / "verl/agent_spec.yaml").read_text())  # what every worker rebuilt
    assert spec["kind"] == "workflow" and [a["name"] for a in spec["agents"]] == list(AGENTS)
    for step, metrics in run["steps"].items():
        assert metrics["actor/grad_norm"] > 0, step
        assert metrics["training/aworld/episodes"] == 4  # batch 2 x group 2
        for agent in AGENTS:
            # each agent's segments are outputs of their own in verl's batch
            assert metrics[f"training/aworld/agent/{agent}/samples"] >= metrics["training/aworld/trained"], (
                step,
                agent,
            )
            assert metrics[f"training/aworld/agent/{agent}/sampled_tokens_mean"] > 0, (step, agent)
        # our rollout served both agents: verl's recompute of every output matches its logprobs
        assert metrics["training/rollout_probs_diff_max"] < 1e-3
