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
        "rollout": {
            "max_new_tokens": 6,
            "max_assistant_turns": 2,
            "tool_block": "never",
            "train_on_malformed": True,
        },
        "data": {"batch_size": 2},
        "reward": {"fn": "aworld_train.rewards.calculator:exact_answer"},
        "trainer": {
            "steps": steps,
            "save_every": 1,
            "save_total_limit": None,  # every step's checkpoint, for the tests to read
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
def trained(tmp_path, tiny_model_dir, monkeypatch):
    # float32 whatever the CPU: its logprob mismatch is then rounding alone (bf16's reaches 0.14 on a token)
    monkeypatch.setenv("AWORLD_TRAIN_DTYPE", "float32")
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


def _sampled_by_task(folder) -> dict[str, list[list[int]]]:
    """Each task's sampled token ids, per episode, from a token set folder."""
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


def test_eval_of_the_final_checkpoint_reproduces_the_runs_own_held_out_figure(trained, tmp_path, capsys):
    """`aworld-train eval` with the run's config on its last checkpoint samples exactly what the
    run's own evaluation after training sampled (the same seeds, temperature and turn limit),
    token for token; the run ended with the held-out line every engine prints."""
    run, summary = trained
    trainer = AgentTrainer(
        config=str(run / "config.yaml"),
        overrides=[f"eval.checkpoints={json.dumps([str(run)])}"],
        test_dataset=ROWS[:2],
    )
    suite = trainer.evaluate_suite(out_dir=tmp_path / "again")
    (result,) = suite.results
    assert result.model.endswith("step_000002") and suite.seeds == [0] and suite.k == 1
    again = _sampled_by_task(tmp_path / "again" / "tokens" / result.label / "seed_0")
    assert again == _sampled_by_task(run / "tokens" / "eval" / "after")
    assert sum(len(ids) for episodes in again.values() for ids in episodes) > 0
    assert result.stats("pass@1")["mean"] == summary["held_out"]["after"]["pass_at_1"]
    assert summary["held_out"]["before"]["episodes"] == 2


def test_every_episode_keeps_its_tokens_with_the_learners_logprobs(tiny_local_run):
    """tokens/: every episode of a step (not only log_trajectories), each trained sample's logprobs
    as the learner recomputed them, and none (null, never 0) where it computed none. In the shared
    run the tiny model samples some episodes itself (tests/viewer_support.py): under the weights
    that sampled them, the learner's logprobs agree with the sampled ones."""
    import pyarrow.parquet as pq
    from viewer_support import scripted_logprobs

    scripted = {round(lp, 6) for lp in scripted_logprobs(7)}  # a scripted reply's logprobs are among these

    run = tiny_local_run
    compared = 0
    for step in (1, 2):
        rows = [
            r
            for p in (run / "tokens" / f"step_{step:06d}").glob("part-*.parquet")
            for r in pq.read_table(p).to_pylist()
        ]
        assert len(rows) == 6 and {r["step"] for r in rows} == {step}  # batch 2 x group 3
        assert {r["version_min"] for r in rows} == {step - 1}  # the weights had step - 1 updates
        for row in rows:
            (seg,) = row["segments"]
            assert len(seg["sampled_logprobs"]) == sum(seg["response_mask"])
            if not row["advantage"]:  # no loss: the learner computed no logprobs for it
                assert seg["trainer_logprobs"] is None
                continue
            assert seg["advantage"] == row["advantage"] and len(seg["trainer_logprobs"]) == sum(
                seg["response_mask"]
            )
            if not all(round(lp, 6) in scripted for lp in seg["sampled_logprobs"]):
                # aligned token for token: in float32 (run_tiny) the cached sampler and the padded
                # learner differ by rounding alone
                diffs = [
                    abs(t - s) for t, s in zip(seg["trainer_logprobs"], seg["sampled_logprobs"], strict=True)
                ]
                assert max(diffs) < 1e-3, diffs
                compared += 1
    assert compared >= 1  # the tiny model sampled a trained episode of every step
    for name in ("before", "after"):
        rows = pq.read_table(next((run / "tokens" / "eval" / name).glob("part-*.parquet"))).to_pylist()
        assert len(rows) == 2 and all(seg["trainer_logprobs"] is None for r in rows for seg in r["segments"])


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


def test_a_reward_that_fails_on_every_episode_stops_the_run_at_that_step(tmp_path, tiny_model_dir):
    """A reward that is NaN everywhere: before, the run printed reward 0 and exited 0."""
    from aworld_train.core.errors import RunCannotLearn

    cfg = config(tmp_path, tiny_model_dir, 6)
    cfg["reward"] = {"fn": "reward_fixtures:always_nan"}
    cfg["trainer"].update({"save_every": 0, "stop_after_failed_steps": 3, "eval_before": False})
    with pytest.raises(
        RunCannotLearn,
        match=r"every episode of the last step ended as 'reward_error' \(reward function .*nan.*fix reward.fn",
    ):
        AgentTrainer(config=cfg, train_dataset=ROWS, test_dataset=ROWS[:2]).train()
    run = tmp_path / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["phase"] == "train"] == [1]
    assert (run / "checkpoints" / "step_000001").is_dir()


def test_a_run_that_trained_on_nothing_fails_however_short_and_a_pipe_sees_each_step(
    capsys, tmp_path, tiny_model_dir
):
    """One step, its every episode failed, no streak limit to reach: the run still fails (exit 1
    from the CLI). Into a pipe (pytest's capture is no terminal) each step is one plain line."""
    from aworld_train.core.errors import RunCannotLearn

    cfg = config(tmp_path, tiny_model_dir, 1)
    cfg["reward"] = {"fn": "reward_fixtures:returns_text"}
    cfg["trainer"].update({"save_every": 0, "stop_after_failed_steps": 0, "eval_before": False})
    with pytest.raises(
        RunCannotLearn,
        match=r"no episode of the run's 1 step\(s\) could be trained \(reward_error 4; e.g. reward function "
        r".*returned 'good'.*\): the run learned nothing; the reward function fails",
    ):
        AgentTrainer(config=cfg, train_dataset=ROWS, test_dataset=ROWS[:2]).train()
    assert (
        "GRPO step 1/1: reward 0.000 | success 0.00 | tools 0.00 | reward_error 4 |"
        in capsys.readouterr().err
    )


def test_only_steps_that_all_fail_for_one_cause_count():
    from aworld_train.core.errors import RunCannotLearn
    from aworld_train.rollout.episodes.trajectory import Trajectory
    from aworld_train.rollout.samples.failure_streak import FailureStreak, TrainedSoFar

    def step(*statuses):
        return [Trajectory(f"e{i}", "t", status=s, error=f"{s} here") for i, s in enumerate(statuses)]

    streak = FailureStreak(limit=2)
    streak.observe(step("tool_server_down", "tool_server_down"))
    streak.observe(step("tool_server_down", "ok"))  # one episode counts: the streak starts again
    streak.observe(step("reward_error", "tool_server_down"))  # two causes: not one broken thing
    streak.observe(step("tool_server_down", "tool_server_down"))
    with pytest.raises(RunCannotLearn, match=r"'tool_server_down' \(tool_server_down here\).*start it"):
        streak.observe(step("tool_server_down"))
    with pytest.raises(RunCannotLearn, match=r"the last step ended as 'reward_error'"):
        FailureStreak(limit=3).observe(step("reward_error", "reward_error"))  # a broken reward: at once
    never = FailureStreak(limit=0)
    for _ in range(5):
        never.observe(step("error"))
    assert never.steps == 5

    trained = TrainedSoFar()
    trained.observe(step("error", "error"), trained=0)
    trained.observe(step("ok", "error"), trained=1)
    trained.require_some()  # one episode trained: the run counts
    nothing = TrainedSoFar()
    nothing.observe(step("error", "timeout"), trained=0)
    with pytest.raises(
        RunCannotLearn, match=r"run's 1 step\(s\) could be trained \(error 1, timeout 1; e.g. error here\)"
    ):
        nothing.require_some()


def test_a_run_keeps_its_last_checkpoints_and_its_best(tmp_path):
    """trainer.save_total_limit: after each save only the last N whole checkpoints stay, and the one
    whose step's held-out accuracy was best; one cut short is left for a resume to pass over."""
    from aworld_train.core.atomic_files import complete_folder
    from aworld_train.engines.local.checkpoints import prune_checkpoints
    from aworld_train.engines.local.run_folder import RunFolder

    folder = RunFolder(tmp_path / "run")
    for step in (1, 2, 3, 4):
        with complete_folder(folder.checkpoint_dir(step), step=step) as tmp:
            (tmp / "weights").write_text("w")
    (folder.path / "checkpoints" / "step_000005.partial").mkdir()  # a save cut short
    for step, accuracy in ((2, 0.75), (3, 0.5), (4, 0.5)):
        folder.log(step, {"accuracy": accuracy}, prefix="eval")
    removed = prune_checkpoints(folder, 1)
    assert sorted(p.name for p in removed) == ["step_000001", "step_000003"]
    assert sorted(p.name for p in (folder.path / "checkpoints").iterdir()) == [
        "step_000002",  # the best
        "step_000004",  # the last
        "step_000005.partial",
    ]
    assert folder.latest_checkpoint() == (4, folder.checkpoint_dir(4))  # what --resume continues
    assert prune_checkpoints(folder, None) == []
    folder.close()
