"""One sample codec for every engine: task rows round-trip, failed episodes stay out of the
loss and the group baseline, multi-segment episodes train their first segment everywhere."""

from __future__ import annotations

import json

import pytest

from aworld_train.engines.local.samples import build_samples
from aworld_train.rollout.episodes.trajectory import Task, Trajectory
from aworld_train.rollout.samples.codec import (
    TASK_FIELD,
    agent_units,
    chat_prompt,
    episode_samples,
    task_from_foreign_row,
    task_from_json,
    task_to_json,
)
from aworld_train.rollout.tokens.ledger import Segment

TASKS = [
    Task(
        "t-1",
        ["What is 2 + 2?", "And times 3?"],
        ground_truth={"answers": [4, 12]},
        system="Answer with a number.",
        data_source="calc",
        extra_info={"level": 2, "tags": ["a", "b"]},
        row={"id": "t-1", "prompt": ["What is 2 + 2?", "And times 3?"]},
    ),
    Task("t-2", ["Hi"], ground_truth="hello"),
]


def test_task_json_round_trip():
    for task in TASKS:
        assert task_from_json(task_to_json(task)) == task


def test_verl_rows_round_trip_through_verls_own_dataset(tmp_path, tokenizer):
    """Our parquet, read by verl's RLHFDataset as its trainer does, gives back the same tasks."""
    pytest.importorskip("verl")
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from aworld_train.engines.verl.loop import task_from_row
    from aworld_train.engines.verl.render import write_parquet

    path = tmp_path / "train.parquet"
    write_parquet(TASKS, path)
    config = OmegaConf.create(
        {"max_prompt_length": 512, "return_raw_chat": True, "filter_overlong_prompts": False}
    )
    dataset = RLHFDataset(str(path), tokenizer, config)
    rows = [dataset[i] for i in range(len(dataset))]
    assert [task_from_row(row) for row in rows] == TASKS
    assert list(rows[0]["raw_prompt"]) == chat_prompt(TASKS[0])  # verl's prompt keeps the system message


def test_areal_rows_round_trip(tmp_path):
    from aworld_train.engines.areal.render import write_jsonl

    path = tmp_path / "train.jsonl"
    write_jsonl(TASKS, path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [task_from_json(row[TASK_FIELD]) for row in rows] == TASKS


def test_a_native_verl_row_becomes_a_task():
    row = {
        "raw_prompt": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}],
        "reward_model": {"ground_truth": "42"},
        "extra_info": {"index": 7},
        "data_source": "gsm8k",
    }
    task = task_from_foreign_row(row)
    assert (task.id, task.system, task.user_turns, task.ground_truth, task.data_source) == (
        "7",
        "S",
        ["Q"],
        "42",
        "gsm8k",
    )


def _traj(status: str, reward: float, segments: int = 1) -> Trajectory:
    segs = [
        Segment(
            prompt_ids=[1, 2], response_ids=[3 + i, 9], response_mask=[1, 1], response_logprobs=[-0.5, -0.1]
        )
        for i in range(segments)
    ]
    return Trajectory("e", "t", status=status, reward=reward, segments=segs)


def test_a_failed_episode_has_no_loss_and_no_place_in_the_baseline():
    ok = [_traj("ok", 1.0), _traj("ok", 0.0), _traj("ok", 0.0)]
    failed = _traj("timeout", 0.0)
    with_failed, adv_with = build_samples([*ok, failed], ["g"] * 4)
    without, adv_without = build_samples(ok, ["g"] * 3)
    assert adv_with[:3] == pytest.approx(adv_without) and adv_with[3] == 0.0
    assert len(with_failed) == len(without) == 3
    samples = episode_samples(failed)
    assert not samples.in_baseline and not samples.trainable
    assert samples.segments[0].response_mask == [0, 0] and samples.segments[0].sampled_mask == [1, 1]


def test_every_segment_trains_with_the_episodes_advantage():
    traj = _traj("ok", 1.0, segments=3)
    samples = episode_samples(traj)
    assert [s.response_ids for s in samples.segments] == [s.response_ids for s in traj.segments]
    (unit,) = agent_units([samples], ["g"])  # engines that take one row per agent (AReaL): the first
    assert unit.segments[0].response_ids == traj.segments[0].response_ids and len(unit.segments) == 3
    built, advantages = build_samples([traj, _traj("ok", 0.0)], ["g", "g"])
    assert [s.ids for s in built] == [[1, 2, 3, 9], [1, 2, 4, 9], [1, 2, 5, 9], [1, 2, 3, 9]]
    assert [s.advantage for s in built[:3]] == [advantages[0]] * 3


def test_malformed_calls_follow_train_on_malformed():
    traj = _traj("malformed_tool_call", 0.0)
    assert not episode_samples(traj).trainable
    assert episode_samples(traj, train_on_malformed=True).trainable
