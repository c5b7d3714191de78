"""verl's own trainer, end to end on a CPU: `aworld-train run` on
examples/calculator/grpo_verl_cpu.yaml launches verl's `main_ppo` (V1 trainer, FSDP2 actor on
gloo, the `aworld_cpu` rollout serving our AWorldAgentLoop, the real calculator MCP server) for
2 GRPO steps. One run, shared by every assertion; a few minutes on 2 cores, hence `slow`; it
starts with the session and runs beside the other tests (tests/early_runs.py).

The random tiny model never answers right, so the run's reward is a dense stand-in
(tests/verl_cpu_support.py); weight decay is 0 in the example, so weights move only by gradients.
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


def start_run(tmp: Path) -> early_runs.Started:
    # 4 tasks = 2 steps of 2: one step holds the task whose reward fails (tests/verl_cpu_support.py)
    failing = {
        "id": "train-fails",
        "prompt": "What is 1 + 1?",
        "ground_truth": -1,
        "data_source": "calculator",
    }
    return launch_cpu_run(tmp, [*calculator_rows(3), json.dumps(failing)])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return early_runs.result(__name__, start_run, tmp_path_factory.mktemp("verl_cpu"))


def test_main_ppo_finishes_two_steps(run):
    assert run["rc"] == 0, run["log"][-4000:]
    assert "verl.trainer.main_ppo" in run["log"]  # the same command as a GPU run
    assert "VERL_PLATFORM=cpu" in run["log"]
    assert sorted(run["steps"]) == [1, 2]
    for metrics in run["steps"].values():
        assert metrics["actor/grad_norm"] > 0  # real gradients reached the FSDP actor
        assert "timing_s/update_actor" in metrics and "timing_s/update_weights" in metrics


def test_weights_after_step_two_differ_from_initial(run):
    import torch
    from safetensors.torch import load_file

    shard = run["run_dir"] / "checkpoints/global_step_2/actor/model_world_size_1_rank_0.pt"
    trained = torch.load(shard, weights_only=False, map_location="cpu")
    initial = load_file(run["model"] / "model.safetensors")
    moved = []
    for name, tensor in trained.items():
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        if name in initial:
            moved.append(float((local.float() - initial[name].float()).abs().max()))
    assert len(moved) >= 10
    assert max(moved) > 0  # weight decay is 0: only gradient steps move them


def test_rollout_serves_the_updated_weights(run):
    for step, metrics in run["steps"].items():
        # verl compares our rollout's logprobs with its actor's recompute, token by token
        assert metrics["training/rollout_probs_diff_max"] < 1e-3, (step, metrics)
        # the replica reports the weight version it served: after step 1, the weights of step 1
        assert metrics["training/off_policy/trajectory_staleness/max"] == 0
    assert run["steps"][2]["training/off_policy/trajectory_staleness/min"] == 0


def test_reward_and_statuses_in_verls_step_metrics(run):
    for metrics in run["steps"].values():
        episodes = metrics["training/aworld/episodes"]
        # batch 2 x group 2 trained, plus the episodes of any group replaced by a fresh prompt
        assert metrics["training/aworld/trained"] == 4
        assert episodes == 4 + metrics["training/aworld/failed"]
        statuses = {k: v for k, v in metrics.items() if k.startswith("training/aworld/status/")}
        assert sum(statuses.values()) == episodes
        # our reward is verl's score over what it trained on: were the failed episodes in its batch
        # (reward 0), its mean would differ; the dense stand-in varies, so advantages do too
        assert metrics["training/aworld/reward/mean"] == pytest.approx(metrics["critic/score/mean"], abs=1e-5)
        assert metrics["critic/advantages/max"] > 0


def test_a_failed_episode_inside_the_run_is_in_the_metrics_and_carries_no_loss(run):
    """The task whose reward fails: both its episodes end as reward_error in the step that drew it,
    verl gets no output for them, a fresh prompt takes the group's place, and the step trains on
    two full groups."""
    failed = [m for m in run["steps"].values() if m["training/aworld/status/reward_error"]]
    assert len(failed) == 1
    metrics = failed[0]
    assert metrics["training/aworld/status/reward_error"] == metrics["training/aworld/failed"] == 2
    assert metrics["training/aworld/episodes"] == 6
    assert metrics["training/aworld/trained"] == 4 and metrics["actor/grad_norm"] > 0


def test_every_episode_reaches_the_run_folders_token_files(run):
    """verl's agent-loop workers write each prompt group's episodes to tokens/step_<global step>/,
    the failed ones too, with the weight versions verl's server reported (staleness 0 here: the
    weights of the step before); advantages and trainer logprobs are verl's trainer's, not written."""
    import pyarrow.parquet as pq

    for step, metrics in run["steps"].items():
        folder = run["run_dir"] / "tokens" / f"step_{step:06d}"
        rows = [r for part in folder.glob("part-*.parquet") for r in pq.read_table(part).to_pylist()]
        assert len(rows) == metrics["training/aworld/episodes"]
        assert all(len(members) == 2 for members in _groups(rows).values())  # group size 2
        sampled = [r for r in rows if r["sampled_tokens"]]
        assert sampled and {(r["version_min"], r["version_max"]) for r in sampled} == {(step - 1, step - 1)}
        assert all(r["advantage"] is None for r in rows)
        for row in sampled:
            for seg in row["segments"]:
                assert (
                    len(seg["sampled_logprobs"]) == sum(seg["response_mask"])
                    and seg["trainer_logprobs"] is None
                )


def _groups(rows: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["group"], []).append(row)
    return groups
