"""A two-agent AWorld swarm on verl's own trainer, end to end on a CPU: `aworld-train run` on
examples/calculator/grpo_verl_cpu.yaml with the calculator pipeline (a planner, then the
calculator agent: AWorld's WorkflowSwarm) as the agent, for 2 GRPO steps. Every agent's ledger
segment is one verl output; both agents' samples reach verl's batch in every step. The run's
advantages are gigpo's (`algorithm.advantage: gigpo`, our estimator in verl's registry): each agent
compared with itself in its prompt group, per turn. One run, a few minutes on 2 cores, hence `slow`;
it runs after the suite (tests/early_runs.py).
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
        "algorithm.advantage=gigpo",
        "algorithm.gamma=0.9",
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


def test_gigpos_advantages_are_credits_for_the_episodes_verl_trained(run):
    """The estimator's record of each step (RUN/turn_advantages.jsonl) against credit.turn_advantages
    recomputed here from the token files' episodes: each agent's turns, their states (what it
    observed before each call) and rewards, grouped by prompt and agent."""
    import json

    import pyarrow.parquet as pq
    import pytest

    from aworld_train.rollout.samples.credit import Turn, anchor_text, turn_advantages

    records = [
        json.loads(line) for line in (run["run_dir"] / "turn_advantages.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in records] == [1, 2] and {r["estimator"] for r in records} == {"gigpo"}
    for record in records:
        folder = run["run_dir"] / "tokens" / f"step_{record['step']:06d}"
        episodes = {
            r["episode_id"]: r for p in folder.glob("part-*.parquet") for r in pq.read_table(p).to_pylist()
        }
        units, groups = [], []
        for unit in record["units"]:
            episode_id, agent = unit["unit"].split("/", 1)
            row = episodes[episode_id]
            observations = [
                o for seg in row["segments"] if seg["agent"] == agent for o in seg["turn_observations"]
            ]
            assert unit["rewards"][-1] == pytest.approx(
                row["reward"]
            )  # the episode's reward on the last turn
            units.append(
                [Turn(r, anchor_text(o)) for r, o in zip(unit["rewards"], observations, strict=True)]
            )
            groups.append(tuple(unit["group"]))
        assert {agent for _, agent in groups} == set(AGENTS)
        expected = turn_advantages("gigpo", units, groups, gamma=0.9)
        got = [a for unit in record["units"] for a in unit["advantages"]]
        assert got == pytest.approx([a for unit in expected for a in unit])
        assert any(got)  # the dense reward differs within groups: something to learn
    for metrics in run["steps"].values():
        assert metrics["actor/grad_norm"] > 0 and metrics["critic/advantages/max"] > 0
