"""The held-out line every engine's run ends with is computed one way from the evaluation token
files, and agrees with `aworld-train eval`'s figures for the same episodes."""

from aworld_train.evaluation.held_out import HeldOut
from aworld_train.evaluation.report import EvalReport
from aworld_train.evaluation.run_summary import eval_sets, held_out_figures, held_out_line
from aworld_train.rollout.episodes.trajectory import Trajectory
from aworld_train.rollout.samples.token_log import TOKENS_DIR, EpisodeNotes, write_episodes

# task -> seed -> the rewards of its k = 2 samples
REWARDS = {"a": {0: [1.0, 0.0], 1: [0.0, 0.0]}, "b": {0: [1.0, 1.0], 1: [0.5, 1.0]}}


def _report(seed: int) -> EvalReport:
    trajs = [
        Trajectory(episode_id=f"{task}{seed}{j}", task_id=task, reward=r)
        for task, by_seed in REWARDS.items()
        for j, r in enumerate(by_seed[seed])
    ]
    return EvalReport.of(trajs, 0.0, 2, [seed] * len(trajs))


def test_the_run_summary_averages_pass_at_k_over_tasks_and_seeds_as_eval_does(tmp_path):
    reports = [_report(0), _report(1)]
    for name, step in (("before", 0), ("after", 3)):
        for report in reports:
            notes = [EpisodeNotes(group=g) for g in report.groups()]
            write_episodes(tmp_path / TOKENS_DIR, f"eval/{name}", report.trajectories, "eval", step, notes)
    figures = held_out_figures(tmp_path, 2)
    after = figures["after"]
    # `aworld-train eval`: each seed's figure, then their mean
    assert after.pass_at_k == sum(r.pass_at(2) for r in reports) / 2 == 0.75
    assert after.pass_at_1 == sum(r.pass_at(1) for r in reports) / 2
    assert after.mean_at_k == sum(r.mean_at_k for r in reports) / 2
    assert after.accuracy == 4 / 8 and after.episodes == 8
    line = held_out_line("local", figures, HeldOut(0.7, 2, (0, 1), 3))
    assert line.startswith(
        "held-out (local; k=2, temperature 0.7, 3 turns, seeds 0 1): before accuracy 50.0%"
    )
    assert "pass@2 0.750" in line


def test_verl_and_areal_sets_are_found_by_their_steps(tmp_path):
    for step in (0, 4, 8):
        write_episodes(
            tmp_path / TOKENS_DIR, f"eval/step_{step:06d}", [Trajectory("e", "t", reward=1.0)], "eval", step
        )
    assert eval_sets(tmp_path) == ("eval/step_000000", "eval/step_000008")
    assert eval_sets(tmp_path / "nothing") == (None, None)
