"""verl's own trainer, end to end on a CPU: `aworld-train run` on
examples/calculator/grpo_verl_cpu.yaml launches verl's `main_ppo` (V1 trainer, FSDP2 actor on
gloo, the `aworld_cpu` rollout serving our AWorldAgentLoop, the real calculator MCP server) for
2 GRPO steps, with verl's validation before the first step and after the last on 4 held-out
tasks; `aworld-train eval` on the run's last checkpoint then samples that final validation again,
token for token. One run, shared by every assertion; a few minutes on 2 cores, hence `slow`; it
starts with the session and runs beside the other tests (tests/early_runs.py).

The model is the tiny random one (tests/verl_cpu_support.py): its statuses and rewards are what
the counts below rest on. It never answers right, so the run's reward is a dense stand-in; weight
decay is 0 (the facade's default), so weights move only by gradients.
"""

from __future__ import annotations

import json
from pathlib import Path

import early_runs
import pytest
from verl_cpu_support import ROOT, calculator_rows, launch_cpu_run

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

HELD_OUT = 4  # the first test tasks, each validated once before training and once after


def start_run(tmp: Path) -> early_runs.Started:
    # 4 tasks = 2 steps of 2: one step holds the task whose reward fails (tests/verl_cpu_support.py)
    failing = {
        "id": "train-fails",
        "prompt": "What is 1 + 1?",
        "ground_truth": -1,
        "data_source": "calculator",
    }
    test = tmp / "test.jsonl"
    rows = (ROOT / "examples/calculator/test.jsonl").read_text().splitlines()[:HELD_OUT]
    test.write_text("\n".join(rows) + "\n")
    return launch_cpu_run(
        tmp,
        [*calculator_rows(3), json.dumps(failing)],
        "trainer.eval_before=true",
        "trainer.eval_after=true",
        f"data.test={test}",
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    result = early_runs.result(__name__, start_run, tmp_path_factory.mktemp("verl_cpu"))
    # verl's line of step 0 is its validation before training: "steps" are the trained ones
    return {**result, "validation_before": result["steps"].pop(0, {})}


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


def test_the_run_ends_with_the_held_out_line_every_engine_prints(run):
    """The line is computed from the validation episodes' token files (evaluation/run_summary.py);
    verl's own validation metric agrees with its accuracy: a failed episode counts 0 in both."""
    from aworld_train.evaluation.held_out import held_out
    from aworld_train.evaluation.run_summary import held_out_figures, held_out_line
    from aworld_train.inputs.config import load_config

    assert run["rc"] == 0, run["log"][-4000:]
    held = held_out(load_config(run["run_dir"] / "config.yaml"))
    figures = held_out_figures(run["run_dir"], held.k)
    assert figures["before"].episodes == figures["after"].episodes == HELD_OUT
    lines = [line for line in run["log"].splitlines() if line.startswith("held-out (verl;")]
    assert lines == [held_out_line("verl", figures, held)]
    assert run["log"].index(lines[0]) > run["log"].index("Final validation metrics")  # once verl is done
    acc = "val-core/calculator/acc/mean@1"
    assert run["validation_before"][acc] == pytest.approx(figures["before"].accuracy)
    assert run["steps"][2][acc] == pytest.approx(figures["after"].accuracy)


def test_eval_of_the_runs_checkpoint_samples_its_final_validation_again(run, tmp_path):
    """`aworld-train eval` with the run's config on the run folder loads the last checkpoint's
    weights (verl's hf_model, in float32 as its CPU rollout) and samples each held-out task as the
    run's validation after step 2 did, token for token: the same seeds, temperature and turn limit."""
    from aworld_train import AgentTrainer
    from aworld_train.evaluation.run_summary import held_out_figures

    assert run["rc"] == 0, run["log"][-4000:]
    run_dir = run["run_dir"]
    trainer = AgentTrainer(
        config=str(run_dir / "config.yaml"), overrides=[f"eval.checkpoints={json.dumps([str(run_dir)])}"]
    )
    suite = trainer.evaluate_suite(out_dir=tmp_path / "again")
    (result,) = suite.results
    assert result.model == str(run_dir / "checkpoints/global_step_2/actor/huggingface")
    again = _sampled_by_task(tmp_path / "again" / "tokens" / result.label / "seed_0")
    assert again == _sampled_by_task(run_dir / "tokens" / "eval" / "step_000002")
    assert len(again) == HELD_OUT and sum(len(ids) for episodes in again.values() for ids in episodes) > 0
    after = held_out_figures(run_dir, 1)["after"]
    assert result.stats("mean@k")["mean"] == pytest.approx(after.mean_at_k)
    assert result.stats("pass@1")["mean"] == pytest.approx(after.pass_at_1)


def _sampled_by_task(folder: Path) -> dict[str, list[list[int]]]:
    """Each task's sampled token ids (mask 1), one list per episode."""
    import pyarrow.parquet as pq

    out: dict[str, list[list[int]]] = {}
    for part in sorted(folder.glob("part-*.parquet")):
        for row in pq.read_table(part, columns=["task_id", "segments"]).to_pylist():
            ids = [
                i
                for seg in row["segments"]
                for i, m in zip(seg["response_ids"], seg["response_mask"], strict=True)
                if m
            ]
            out.setdefault(row["task_id"], []).append(ids)
    return {task: sorted(episodes) for task, episodes in out.items()}
