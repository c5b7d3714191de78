"""The run folder's token files (rollout/samples/token_log.py): what an episode's row keeps, that a value an
engine does not know is null (never 0), that a reader never meets half a file, and how verl's
agent-loop workers write a prompt group's episodes."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from aworld_train.rollout.episodes.trajectory import ToolCallRecord, Trajectory
from aworld_train.rollout.samples.token_log import (
    FORMAT_VERSION,
    EpisodeNotes,
    episode_row,
    write_episodes,
)
from aworld_train.rollout.tokens.ledger import Segment


def team_episode() -> Trajectory:
    """Two agents; the planner's segment has a template delta (mask 0) between two sampled runs."""
    planner = Segment(
        prompt_ids=[1, 2, 3],
        response_ids=[10, 11, 90, 91, 12],
        response_mask=[1, 1, 0, 0, 1],
        response_logprobs=[-0.1, -0.2, 0.0, 0.0, -0.3],
        turn_starts=[3, 8],
        agent="planner",
    )
    solver = Segment(
        prompt_ids=[4, 5],
        response_ids=[20, 21],
        response_mask=[1, 1],
        response_logprobs=[-1.0, -2.0],
        turn_starts=[2],
        agent="solver",
    )
    traj = Trajectory("e1", "t1", status="ok", reward=1.0, segments=[planner, solver])
    traj.tool_calls = [
        ToolCallRecord("c1", "calculate", {"expression": "1+1"}, result="2", latency_s=0.05, agent="planner"),
        ToolCallRecord("c2", "search", {"q": "x"}, result="Error executing tool", error=True, agent="solver"),
    ]
    traj.prompt_inputs = {
        "planner": {"messages": [{"role": "user", "content": "hi"}], "tools": [{"x": 1}], "few_shot": []},
        "solver": {"messages": [{"role": "user", "content": "go"}], "tools": None, "few_shot": []},
    }
    return traj


def test_a_row_keeps_a_logprob_only_where_the_policy_sampled():
    row = episode_row(team_episode(), "train", 3)
    planner, solver = row["segments"]
    assert planner["sampled_logprobs"] == [-0.1, -0.2, -0.3]  # the delta's two positions hold none
    assert planner["response_mask"] == [1, 1, 0, 0, 1] and planner["turn_starts"] == [3, 8]
    assert solver["sampled_logprobs"] == [-1.0, -2.0]
    # what the engine did not say is null: no trainer logprobs, versions or advantages
    assert (
        planner["trainer_logprobs"] is None and planner["versions"] is None and planner["advantage"] is None
    )
    assert row["advantage"] is None and row["version_min"] is None
    assert row["agents"] == ["planner", "solver"] and row["tool_names"] == ["calculate", "search"]
    assert (row["tool_calls"], row["tool_errors"], row["tokens"], row["sampled_tokens"]) == (2, 1, 12, 5)
    calls = json.loads(row["trajectory"])["tool_calls"]
    assert calls[0]["latency_s"] == 0.05 and calls[1]["error"] is True
    assert json.loads(row["conversations"])["solver"] == [{"role": "user", "content": "go"}]
    assert json.loads(row["render_context"])["planner"]["tools"] == [{"x": 1}]


def test_what_the_engine_knows_is_kept_per_sampled_token():
    traj = team_episode()
    notes = EpisodeNotes(
        group="g",
        advantage=0.5,
        segment_advantages={0: 0.5, 1: -0.25},
        trainer_logprobs={0: [-0.11, -0.19, -0.33]},
        version_span=(3, 3),
    )
    solver_segment = traj.segments[1]
    solver_segment.response_versions = [5 if m else -1 for m in solver_segment.response_mask]
    solver_segment.response_versions[solver_segment.response_mask.index(1)] = 4
    row = episode_row(traj, "train", 5, notes)
    planner, solver = row["segments"]
    assert planner["trainer_logprobs"] == [-0.11, -0.19, -0.33] and solver["trainer_logprobs"] is None
    assert solver["versions"] == [4, 5] and (row["version_min"], row["version_max"]) == (3, 5)
    assert (planner["advantage"], solver["advantage"], row["advantage"], row["group"]) == (
        0.5,
        -0.25,
        0.5,
        "g",
    )
    with pytest.raises(ValueError, match="3 sampled tokens but 2 trainer logprobs"):
        episode_row(traj, "train", 5, EpisodeNotes(trainer_logprobs={0: [-0.1, -0.2]}))


def test_a_segments_own_versions_are_read_where_the_rollout_core_records_them():
    traj = team_episode()
    traj.segments[0].response_versions = [7, 7, -1, -1, 8]  # one per response token, -1 where not sampled
    row = episode_row(traj, "train", 9)
    assert row["segments"][0]["versions"] == [7, 7, 8]
    assert (row["version_min"], row["version_max"]) == (7, 8)


def test_a_part_file_appears_whole_and_reads_back(tmp_path):
    path = write_episodes(tmp_path / "tokens", "step_000002", [team_episode()], "train", 2)
    assert path.parent == tmp_path / "tokens" / "step_000002" and path.name.startswith("part-")
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    table = pq.read_table(path)
    assert table.schema.metadata[b"aworld_train.tokens"] == str(FORMAT_VERSION).encode()
    (row,) = table.to_pylist()
    assert row["segments"][0]["sampled_logprobs"] == pytest.approx([-0.1, -0.2, -0.3])
    assert write_episodes(tmp_path / "tokens", "step_000003", [], "train", 3) is None


def test_a_failed_write_leaves_no_file(tmp_path, monkeypatch):
    import aworld_train.rollout.samples.token_log as token_log

    def broken(table, where, **kwargs):
        open(where, "wb").write(b"PAR1 half")
        raise OSError("disk full")

    monkeypatch.setattr(token_log.pq, "write_table", broken)
    with pytest.raises(OSError, match="disk full"):
        write_episodes(tmp_path / "tokens", "step_000001", [team_episode()], "train", 1)
    assert list((tmp_path / "tokens" / "step_000001").iterdir()) == []


def test_verls_workers_write_a_group_once_its_last_episode_ends(tmp_path):
    """verl runs a prompt group's sessions in one worker: its part file is written when the last
    one ends; validation rows go to eval/; a group left waiting is written at a later episode."""
    import asyncio

    from aworld_train.engines.verl.tokens import GroupWriter, record_episode

    writer = GroupWriter(tmp_path / "tokens", max_wait_s=60.0)
    steps = {"min_global_steps": 2, "max_global_steps": 3}

    def add(uid, split="train", n=2):
        kwargs = {"uid": uid, "global_steps": 3, "extra_info": {"split": split}}
        asyncio.run(record_episode(writer, kwargs, team_episode(), steps, train_n=n, val_n=1))

    def rows(set_name):
        return [
            r
            for p in (tmp_path / "tokens" / set_name).glob("part-*.parquet")
            for r in pq.read_table(p).to_pylist()
        ]

    add("u1")
    assert not (tmp_path / "tokens").exists()
    add("u1")
    assert [
        (r["group"], r["phase"], r["step"], r["version_min"], r["version_max"]) for r in rows("step_000003")
    ] == [("u1", "train", 3, 2, 3)] * 2
    add("v1", split="val")  # validation: verl's val_kwargs.n samples (1 here)
    assert [r["phase"] for r in rows("eval/step_000003")] == ["eval"]
    add("u2", n=3)
    writer.max_wait_s = 0.0  # u2's other sessions never come (their loops raised)
    add("u3", n=3)
    assert sorted(r["group"] for r in rows("step_000003")) == ["u1", "u1", "u2", "u3"]
