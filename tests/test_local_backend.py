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


def versions(path) -> set[tuple[int, int]]:
    """The (oldest, newest) weight versions of the episodes in a trajectory JSONL that sampled."""
    episodes = [json.loads(line) for line in path.read_text().splitlines()]
    found = {(e["min_version"], e["max_version"]) for e in episodes if e["min_version"] is not None}
    assert found, path
    return found


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
        and 0.0 <= summary["mean_reward_before"] <= 1.0
        and 0.0 <= summary["mean_reward_after"] <= 1.0
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
    # every sampled token's weight version is the count of the learner's updates before it
    assert versions(run / "trajectories/step_000001.jsonl") == {(0, 0)}
    assert versions(run / "trajectories/step_000002.jsonl") == {(1, 1)}
    assert versions(run / "eval/before.jsonl") == {(0, 0)} and versions(run / "eval/after.jsonl") == {(2, 2)}
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
    assert versions(run / "trajectories/step_000003.jsonl") == {(2, 2)}  # the version resumed too


def test_a_run_whose_every_episode_fails_for_one_cause_stops_and_keeps_its_logs(tmp_path, tiny_model_dir):
    """A reward that is NaN everywhere: before, the run printed reward 0 and exited 0."""
    from aworld_train.errors import RunCannotLearn

    cfg = config(tmp_path, tiny_model_dir, 6)
    cfg["reward"] = {"fn": "reward_fixtures:always_nan"}
    cfg["trainer"].update({"save_every": 0, "stop_after_failed_steps": 2, "eval_before": False})
    with pytest.raises(RunCannotLearn, match=r"last 2 steps ended as 'reward_error' .*fix reward.fn"):
        AgentTrainer(config=cfg, train_dataset=ROWS, test_dataset=ROWS[:2]).train()
    run = tmp_path / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["phase"] == "train"] == [1, 2]
    assert (run / "checkpoints" / "step_000002").is_dir()


def test_only_steps_that_all_fail_for_one_cause_count():
    from aworld_train.errors import RunCannotLearn
    from aworld_train.rollout.failure_streak import FailureStreak
    from aworld_train.rollout.trajectory import Trajectory

    def step(*statuses):
        return [Trajectory(f"e{i}", "t", status=s, error=f"{s} here") for i, s in enumerate(statuses)]

    streak = FailureStreak(limit=2)
    streak.observe(step("reward_error", "reward_error"))
    streak.observe(step("reward_error", "ok"))  # one episode counts: the streak starts again
    streak.observe(step("reward_error", "tool_server_down"))  # two causes: not one broken thing
    streak.observe(step("tool_server_down", "tool_server_down"))
    with pytest.raises(RunCannotLearn, match=r"'tool_server_down' \(tool_server_down here\).*start it"):
        streak.observe(step("tool_server_down"))
    never = FailureStreak(limit=0)
    for _ in range(5):
        never.observe(step("error"))
    assert never.steps == 5
