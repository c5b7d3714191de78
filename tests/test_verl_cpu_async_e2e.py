"""verl's asynchronous trainers, end to end on a CPU with our agent loop: `aworld-train run` on
examples/calculator/grpo_verl_cpu.yaml with `verl.trainer.v1.trainer_mode` colocate_async (and
verl's rollout correction on our logprobs) and separate_async (a standalone aworld_cpu replica fed
by the aworld_cpu checkpoint engine), 3 GRPO steps each. A couple of minutes a run on 2 cores,
hence `slow`; they run last, with the machine to themselves (tests/early_runs.py).

As in test_verl_cpu_e2e.py the tiny random model is rewarded by a dense stand-in, and one task's
reward raises: its groups have no episode to train and must be replaced, as in the sync trainer.
"""

from __future__ import annotations

import json
from pathlib import Path

import early_runs
import pytest
from verl_cpu_support import calculator_rows, launch_cpu_run

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

FAILING = {"id": "train-fails", "prompt": "What is 1 + 1?", "ground_truth": -1, "data_source": "calculator"}
STEPS = [1, 2, 3]


def start(tmp: Path, *overrides: str) -> early_runs.Started:
    # 4 tasks, batches of 2: the warm-up batch and the steps' cycle through them, the failing one among them
    rows = [*calculator_rows(3), json.dumps(FAILING)]
    return launch_cpu_run(tmp, rows, "trainer.steps=3", *overrides)


def start_colocate(tmp: Path) -> early_runs.Started:
    # the facade's staleness bound: verl's colocated async trainer, with its rollout correction
    # (gradient checkpointing as verl's own default has it: an update slow enough that the next
    # step's groups are all sampled before it ends)
    return start(tmp, "algorithm.max_staleness=2", "algorithm.gradient_checkpointing=true")


def start_separate(tmp: Path) -> early_runs.Started:
    # the facade's staleness bound, in verl's other asynchronous mode (a native key that agrees)
    return start(
        tmp,
        "algorithm.max_staleness=2",
        "verl.trainer.v1.trainer_mode=separate_async",
        "verl.trainer.v1.separate_async.parameter_sync_step=1",
    )


@pytest.fixture(scope="module")
def colocate(tmp_path_factory):
    return early_runs.result(f"{__name__}.colocate", start_colocate, tmp_path_factory.mktemp("colocate"))


@pytest.fixture(scope="module")
def separate(tmp_path_factory):
    return early_runs.result(f"{__name__}.separate", start_separate, tmp_path_factory.mktemp("separate"))


@pytest.fixture(params=["colocate", "separate"])
def run(request):
    return request.getfixturevalue(request.param)


def test_the_async_trainer_finishes_three_steps(run):
    assert run["rc"] == 0, run["log"][-4000:]
    assert sorted(run["steps"]) == STEPS
    for metrics in run["steps"].values():
        assert metrics["actor/grad_norm"] > 0
        assert "timing_s/update_weights" in metrics


def test_staleness_is_in_verls_step_log(run):
    """The first step trains the warm-up groups, sampled with the initial weights; later steps train
    groups sampled while the previous step trained: one version behind (verl's
    trajectory_staleness counts the versions between the weights that sampled a trajectory and the
    weights trained)."""
    steps = run["steps"]
    assert steps[1]["training/off_policy/trajectory_staleness/max"] == 0
    assert max(steps[s]["training/off_policy/trajectory_staleness/max"] for s in (2, 3)) >= 1
    # one warm-up batch keeps verl's pipeline one step deep (its bound, 8 steps, is never reached);
    # a rollout that missed a weight update would fall further behind each step
    for metrics in steps.values():
        assert metrics["training/off_policy/trajectory_staleness/max"] <= 1


def test_a_group_with_no_episode_to_train_is_replaced_as_in_sync(run):
    """The failing task's groups give verl no output; our sampler evicts them (verl's own
    rollout_failure metric) and a fresh prompt takes their place: every step trains 2 full groups."""
    evicted = 0
    for metrics in run["steps"].values():
        assert metrics["training/aworld/trained"] == 4
        assert metrics["training/aworld/episodes"] == 4 + metrics["training/aworld/failed"]
        assert metrics["training/aworld/status/reward_error"] == metrics["training/aworld/failed"]
        assert (
            metrics.get("training/rollout_failure/evicted_samples", 0) * 2
            == metrics["training/aworld/failed"]
        )
        evicted += metrics.get("training/rollout_failure/evicted_samples", 0)
    assert evicted >= 1


def test_rollout_correction_reads_our_logprobs(colocate):
    """verl's rollout importance sampling (algorithm.rollout_correction.rollout_is: token) weighs each
    token by exp(actor logprob - our recorded logprob). With the weights the rollout sampled with,
    the two differ only by the actor's bf16 arithmetic; on trajectories a version behind, by the update too."""
    steps = colocate["steps"]
    first = steps[1]
    assert abs(first["rollout_corr/log_ppl_diff"]) < 0.1
    assert abs(first["rollout_corr/rollout_is_mean"] - 1) < 0.05
    # a step whose batch holds any trajectory sampled a version behind (verl's asynchronous batch
    # may mix them with fresh ones) spreads the weights wider than the first step's bf16 noise
    stale = [s for s in (2, 3) if steps[s]["training/off_policy/trajectory_staleness/max"] >= 1]
    assert stale, "no step trained on a trajectory sampled with older weights"
    for step in stale:
        assert steps[step]["rollout_corr/rollout_is_std"] > first["rollout_corr/rollout_is_std"]


def test_separate_async_serves_from_its_standalone_replica(separate):
    """Its weights reach it through the aworld_cpu checkpoint engine after every step (were they
    lost, its tokens' versions would fall behind step by step: test_staleness_is_in_verls_step_log)."""
    config = (separate["run_dir"] / "verl" / "verl_config.yaml").read_text()
    assert "backend: aworld_cpu" in config
    # verl's standalone replica, rank 1 beside the hybrid replica 0 on the actor's slot, in its balancer
    assert "aworld_cpu_server_1_0" in separate["log"]
