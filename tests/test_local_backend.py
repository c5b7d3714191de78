"""backend: local end to end on a tiny random model: run folder, checkpoints, resume."""

import json

import pytest
import yaml

from aworld_train import AgentTrainer

ROWS = [{"prompt": f"What is {i} + 1?", "ground_truth": i + 1} for i in range(6)]


def config(tmp_path, model_dir, steps):
    return {
        "model": str(model_dir),
        "agent": "aworld_train.agents.calculator:build_agent",
        "algorithm": {"group_size": 2, "lr": 1e-4},
        "rollout": {"max_new_tokens": 6, "max_turns": 2, "tool_block": "never", "train_on_malformed": True},
        "data": {"batch_size": 2},
        "reward": {"fn": "aworld_train.rewards.calculator:exact_answer"},
        "trainer": {
            "steps": steps,
            "save_every": 1,
            "eval_every": 0,
            "run_dir": str(tmp_path / "run"),
            "log_trajectories": 2,
        },
        "env": [{"name": "calculator"}],
    }


@pytest.fixture
def trained(tmp_path, tiny_model_dir):
    summary = AgentTrainer(
        config=config(tmp_path, tiny_model_dir, 2), train_dataset=ROWS, test_dataset=ROWS[:2]
    ).train()
    return tmp_path / "run", summary


def test_run_folder_holds_everything_a_user_needs(trained):
    run, summary = trained
    assert (
        summary["steps"] == 2
        and summary["accuracy_before"] is not None
        and summary["accuracy_after"] is not None
    )
    for name in (
        "config.yaml",
        "agent_spec.yaml",
        "metrics.jsonl",
        "reward_curve.png",
        "eval/before.jsonl",
        "eval/after.jsonl",
    ):
        assert (run / name).is_file(), name
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert yaml.safe_load((run / "config.yaml").read_text())["trainer"]["steps"] == 2
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if r["phase"] == "train"]
    assert [r["step"] for r in train_rows] == [1, 2]
    for key in (
        "reward_mean",
        "success_rate",
        "tool_call_rate",
        "step_s",
        "logprob_mismatch_mean",
        "statuses",
        "peak_rss_mb",
    ):
        assert key in train_rows[0], key
    assert train_rows[0]["logprob_mismatch_mean"] < 1e-3
    assert len((run / "trajectories" / "step_000001.jsonl").read_text().splitlines()) == 2
    for step in (1, 2):
        ckpt = run / "checkpoints" / f"step_{step:06d}"
        assert (
            (ckpt / "trainer_state.pt").is_file()
            and (ckpt / "config.json").is_file()
            and (ckpt / "tokenizer.json").is_file()
        )
    assert summary["final_checkpoint"].endswith("step_000002")


def test_resume_continues_from_the_latest_checkpoint(trained, tmp_path, tiny_model_dir):
    run, _ = trained
    cfg = config(tmp_path, tiny_model_dir, 3)
    cfg["trainer"]["eval_before"] = False
    AgentTrainer(config=cfg, train_dataset=ROWS, test_dataset=ROWS[:2]).train(resume=True)
    steps = [
        json.loads(line)["step"]
        for line in (run / "metrics.jsonl").read_text().splitlines()
        if '"phase": "train"' in line
    ]
    assert steps == [1, 2, 3]
    assert (run / "checkpoints" / "step_000003" / "trainer_state.pt").is_file()
