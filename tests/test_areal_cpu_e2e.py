"""AReaL's own trainer, end to end on a CPU: `aworld-train run` on
examples/calculator/grpo_areal_cpu.yaml, in the AReaL environment, launches AReaL's
single-controller PPOTrainer through our entry point (FSDP actor on AReaL's CPU platform and
gloo, its rollout workers running our AWorldWorkflow against the real calculator MCP server, our
policy server in SGLang's place) for 3 GRPO steps, off-policy: `rollout.max_head_offpolicyness: 2`
lets AReaL sample up to two versions ahead of the weights it trains. One run, shared by every
assertion; a few minutes on 2 cores, hence `slow`; it runs last (tests/early_runs.py).

The random tiny model never answers right, so the run's reward is the dense stand-in of the verl
CPU test (tests/verl_cpu_support.py), which raises for one task: its episodes fail inside the run.
"""

from __future__ import annotations

import json
from pathlib import Path

import early_runs
import pytest
from areal_support import AREAL_PYTHON, needs_areal
from verl_cpu_support import calculator_rows, cpu_run

from aworld_train.rollout.samples.codec import group_advantages

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500), needs_areal]

FAILING = {"id": "train-fails", "prompt": "What is 1 + 1?", "ground_truth": -1, "data_source": "calculator"}
OFF_POLICY = ("trainer.steps=3", "areal.rollout.max_head_offpolicyness=2")
STEPS = [0, 1, 2]  # AReaL counts its steps from 0


def scalars(tensorboard: Path) -> dict[str, dict[int, float]]:
    """AReaL's stats as its StatsLogger wrote them: tag -> {step: value}."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, dict[int, float]] = {}
    for events in sorted(tensorboard.glob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, {}).update({e.step: e.value for e in acc.Scalars(tag)})
    return out


def start_run(tmp: Path) -> early_runs.Started | None:
    if not AREAL_PYTHON:
        return None
    # 4 tasks, 2 a step: the task whose reward fails is among them
    rows = [*calculator_rows(3), json.dumps(FAILING)]
    command, run_dir, model = cpu_run(
        AREAL_PYTHON, "examples/calculator/grpo_areal_cpu.yaml", tmp, rows, *OFF_POLICY
    )

    def collect(returncode: int, log: str) -> dict:
        episodes = run_dir / "episodes.jsonl"
        events = run_dir / "areal" / "cpu_server_events.jsonl"
        return {
            "rc": returncode,
            "log": log,
            "run_dir": run_dir,
            "model": model,
            "stats": scalars(run_dir / "tensorboard"),
            "episodes": [json.loads(line) for line in episodes.read_text().splitlines()]
            if episodes.is_file()
            else [],
            "weight_loads": [json.loads(line) for line in events.read_text().splitlines()]
            if events.is_file()
            else [],
        }

    return early_runs.launch(command, tmp, 1400, collect, cwd=tmp)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return early_runs.result(__name__, start_run, tmp_path_factory.mktemp("areal_cpu"))


def test_areals_trainer_finishes_three_steps(run):
    assert run["rc"] == 0, run["log"][-4000:]
    assert "aworld_train.engines.areal.main" in run["log"]  # the entry point of a GPU run
    assert "CPU platform" in run["log"] and "CPU policy server" in run["log"]
    stats = run["stats"]
    assert sorted(stats["ppo_actor/update/grad_norm"]) == STEPS
    assert all(value > 0 for value in stats["ppo_actor/update/grad_norm"].values())


def test_weights_after_step_two_differ_from_initial(run):
    from safetensors.torch import load_file

    saved = sorted(
        run["run_dir"].glob("areal_files/checkpoints/*/*/*/default/*globalstep1/model.safetensors")
    )
    assert len(saved) == 1, list(run["run_dir"].glob("areal_files/checkpoints/**/*"))
    trained, initial = load_file(str(saved[0])), load_file(str(run["model"] / "model.safetensors"))
    moved = [float((trained[name].float() - initial[name].float()).abs().max()) for name in initial]
    assert len(moved) >= 10 and max(moved) > 0  # weight decay is 0: only gradient steps move them


def test_the_policy_server_serves_each_update(run):
    """AReaL's actor saves its weights after each step and our server loads them, and samples with
    each version before the next load."""
    loads = run["weight_loads"]
    assert [load["version"] for load in loads] == [1, 2, 3]
    assert all(load["tensors"] >= 10 and load["served_on_previous"]["requests"] > 0 for load in loads)
    assert [load["served_on_previous"]["version"] for load in loads] == [0, 1, 2]
    assert run["stats"]["ppo_actor/update/version_stats/v_theta"] == {step: float(step) for step in STEPS}


def test_off_policy_steps_train_tokens_of_older_weights_within_the_bound(run):
    """AReaL's own staleness stats, computed from the `versions` our rows carry: the first step trains
    tokens of its own weights, later ones tokens sampled while earlier steps trained, never more than
    max_head_offpolicyness (2) versions old. Where the tokens are the trained weights' own, the
    actor's forward gives the logprobs the server sampled with (ratios of 1); where they are older,
    the ratio to the behaviour logprobs we recorded moves away from 1."""
    stats = run["stats"]
    staleness = stats["ppo_actor/update/version_stats/sample_staleness_theta_max"]
    oldest = stats["ppo_actor/update/version_stats/sample_staleness_theta_min"]
    assert staleness[0] == 0 and max(staleness.values()) >= 1 and max(staleness.values()) <= 2
    for step in STEPS:
        highest = stats["ppo_actor/update/importance_weight/max"][step]
        lowest = stats["ppo_actor/update/importance_weight/min"][step]
        if staleness[step] == 0:
            assert abs(highest - 1) < 1e-3 and abs(lowest - 1) < 1e-3
        if oldest[step] >= 1:  # every token stale
            assert max(highest - 1, 1 - lowest) > 1e-2


def test_our_rows_carry_the_versions_areals_engine_returned(run):
    """Per episode, the sampled tokens per version in the rows our workflow gave AReaL (through our
    ledger) equal those AReaL's engine returned; and no version is credited with more tokens than
    our server sampled with it."""
    trained = [e for e in run["episodes"] if e["phase"] == "train" and e["advantage"] is not None]
    assert trained
    for episode in trained:
        assert episode["versions"] == episode["engine_versions"], episode
        assert episode["min_version"] == min(map(int, episode["versions"]))
        assert episode["max_version"] == max(map(int, episode["versions"]))
    assert len({v for e in run["episodes"] for v in e["engine_versions"]}) >= 2  # sampled by several
    stamped: dict[int, int] = {}
    for episode in run["episodes"]:
        for version, tokens in episode["engine_versions"].items():
            stamped[int(version)] = stamped.get(int(version), 0) + tokens
    for load in run["weight_loads"]:
        served = load["served_on_previous"]
        assert stamped.get(served["version"], 0) <= served["tokens"], (stamped, load)


def test_our_reward_and_statuses_are_in_areals_stats(run):
    stats = run["stats"]
    assert set(stats["rollout/reward"]) <= set(STEPS) and 0 in stats["rollout/reward"]
    for step in stats["rollout/reward"]:
        statuses = {tag: values[step] for tag, values in stats.items() if tag.startswith("rollout/status/")}
        assert sum(statuses.values()) == pytest.approx(1.0)
    failed_steps = [step for step, share in stats["rollout/status/reward_error"].items() if share > 0]
    assert failed_steps and all(stats["rollout/status/reward_error"][step] < 1 for step in failed_steps)
    # the failed group gave AReaL nothing: it counts it as rejected, in that step only
    assert {step for step, n in stats.get("rollout/rejected", {}).items() if n > 0} == set(failed_steps)


def groups(episodes: list[dict], size: int = 2) -> list[list[dict]]:
    """The workflow writes a task's group in one piece: consecutive lines of `size`."""
    return [episodes[i : i + size] for i in range(0, len(episodes), size)]


def test_a_failed_episode_leaves_the_other_groups_advantages_as_without_it(run):
    """The task whose reward raises: both its episodes end as reward_error and give AReaL no row
    (AReaL draws another task in its place, which on 4 tasks may be that task again, from the next
    epoch); every other group trains with its own advantages."""
    train = groups([e for e in run["episodes"] if e["phase"] == "train"])
    assert all(len({e["task_id"] for e in group}) == 1 for group in train)
    failed = [group for group in train if group[0]["task_id"] == "train-fails"]
    assert failed
    for group in failed:
        assert [e["status"] for e in group] == ["reward_error", "reward_error"]
        assert all(e["advantage"] is None and e["reward"] is None for e in group)
    trained = [group for group in train if group[0]["task_id"] != "train-fails"]
    # 3 steps x 2 tasks; AReaL samples ahead of the steps (off-policy), so more groups finish
    assert len(trained) >= 6
    for group in trained:
        expected = group_advantages([e["reward"] for e in group], [0] * len(group))
        assert [e["advantage"] for e in group] == pytest.approx(expected)
        assert all(e["status"] == "ok" and e["loss_tokens"] > 0 for e in group)
    # AReaL trained on the rows it got: their rewards (our advantages) average 0 in every step
    assert all(abs(value) < 1e-5 for value in run["stats"]["ppo_actor/task_reward/avg"].values())
