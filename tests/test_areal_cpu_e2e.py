"""AReaL's own trainer, end to end on a CPU: `aworld-train run` on
examples/calculator/grpo_areal_cpu.yaml, in the AReaL environment, launches AReaL's
single-controller PPOTrainer through our entry point (FSDP actor on AReaL's CPU platform and
gloo, its rollout workers running our AWorldWorkflow against the real calculator MCP server, our
policy server in SGLang's place) for 2 GRPO steps. One run, shared by every assertion; a few
minutes on 2 cores, hence `slow`; it starts with the session and runs beside the other tests
(tests/early_runs.py).

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

from aworld_train.rollout.codec import group_advantages

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500), needs_areal]

FAILING = {"id": "train-fails", "prompt": "What is 1 + 1?", "ground_truth": -1, "data_source": "calculator"}


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
    # 4 tasks = 2 steps of 2: one step holds the task whose reward fails
    rows = [*calculator_rows(3), json.dumps(FAILING)]
    command, run_dir, model = cpu_run(AREAL_PYTHON, "examples/calculator/grpo_areal_cpu.yaml", tmp, rows)

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


def test_areals_trainer_finishes_two_steps(run):
    assert run["rc"] == 0, run["log"][-4000:]
    assert "aworld_train.engines.areal.main" in run["log"]  # the entry point of a GPU run
    assert "CPU platform" in run["log"] and "CPU policy server" in run["log"]
    stats = run["stats"]
    assert sorted(stats["ppo_actor/update/grad_norm"]) == [0, 1]
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
    """AReaL's actor saves its weights after each step and our server loads them: the version AReaL
    records on each sampled token is the one the server had loaded when it sampled it."""
    loads = run["weight_loads"]
    assert [load["version"] for load in loads] == [1, 2]
    assert all(load["tensors"] >= 10 and load["served_on_previous"]["requests"] > 0 for load in loads)
    assert [load["served_on_previous"]["version"] for load in loads] == [0, 1]
    assert run["stats"]["rollout/weight_version"] == {0: 0.0, 1: 1.0}
    assert run["stats"]["ppo_actor/update/version_stats/v_theta"] == {0: 0.0, 1: 1.0}
    for step in (0, 1):
        # the actor's own forward gives the logprobs the server sampled with: ratios of 1
        assert abs(run["stats"]["ppo_actor/update/importance_weight/max"][step] - 1) < 1e-3
        assert abs(run["stats"]["ppo_actor/update/importance_weight/min"][step] - 1) < 1e-3


def test_our_reward_and_statuses_are_in_areals_stats(run):
    stats = run["stats"]
    assert set(stats["rollout/reward"]) == {0, 1}
    for step in (0, 1):
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
    # 2 steps x 2 tasks; AReaL may have drawn more than the failed group's replacement ahead of the step
    assert len(trained) >= 4
    for group in trained:
        expected = group_advantages([e["reward"] for e in group], [0] * len(group))
        assert [e["advantage"] for e in group] == pytest.approx(expected)
        assert all(e["status"] == "ok" and e["loss_tokens"] > 0 for e in group)
    # AReaL trained on the rows it got: their rewards (our advantages) average 0 in every step
    assert all(abs(value) < 1e-5 for value in run["stats"]["ppo_actor/task_reward/avg"].values())
