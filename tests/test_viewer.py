"""The viewer's logic without a browser: drift counting, GRPO groups with zero spread, filters, the
comparison of two evaluations, its routes, and `aworld-train view`'s refusals."""

from __future__ import annotations

import json

import pytest
from test_token_log import team_episode

from aworld_train.rollout.episodes.trajectory import ToolCallRecord, Trajectory
from aworld_train.rollout.samples.token_log import EpisodeNotes, write_episodes
from aworld_train.rollout.tokens.ledger import Segment
from aworld_train.viewer.drift import compare
from aworld_train.viewer.views import Filters, compare_sets, groups_page


def test_drift_counts_differing_tokens_and_not_the_next_turns_opening():
    assert compare([1, 2, 3], [1, 2, 3])["differing"] == 0
    same = compare([1, 2, 3, 4], [1, 9, 3, 4])
    assert same["differing"] == 1 and same["ledger_same"] == [True, False, True, True]
    split = compare([1, 50, 3], [1, 5, 0, 3])  # one sampled token the template text splits in two
    assert split["differing"] == 2 and split["fresh_same"] == [True, False, False, True]
    after = compare([1, 2], [1, 2, 7, 8])  # the render goes on past the last reply
    assert (after["differing"], after["trailing"]) == (0, 2)


def episode(eid, task, reward, status="ok", tools=(), agent="a", text="") -> Trajectory:
    seg = Segment([1, 2], [3, 4], [1, 1], [-0.1, -0.2], [2], agent=agent)
    traj = Trajectory(eid, task, status=status, reward=reward, segments=[seg], final_answer=text)
    traj.tool_calls = [ToolCallRecord(f"{eid}-{i}", name, {}, agent=agent) for i, name in enumerate(tools)]
    return traj


@pytest.fixture
def run(tmp_path):
    from aworld_train.viewer.store import Run

    flat = [episode(f"f{i}", "t1", 1.0, tools=("calculate",)) for i in range(3)]
    mixed = [
        episode("m0", "t2", 1.0, tools=("calculate",), text="The answer is 8."),
        episode("m1", "t2", 0.0, agent="b", text="The answer is 0."),
        episode("m2", "t2", 0.0, status="timeout"),  # failed: outside the baseline
    ]
    trained = [EpisodeNotes(group="g1", advantage=0.0)] * 3 + [
        EpisodeNotes(group="g2", advantage=0.7),
        EpisodeNotes(group="g2", advantage=-0.7),
        EpisodeNotes(group="g2"),
    ]
    write_episodes(tmp_path / "tokens", "step_000001", flat + mixed, "train", 1, trained)
    write_episodes(
        tmp_path / "tokens", "eval/before", [episode("b1", "t1", 0.0), episode("b2", "t2", 0.0)], "eval", 0
    )
    write_episodes(
        tmp_path / "tokens", "eval/after", [episode("a1", "t1", 1.0), episode("a2", "t3", 1.0)], "eval", 1
    )
    return Run(tmp_path)


def test_a_group_whose_compared_samples_share_one_reward_is_flagged(run):
    page = groups_page(run, "step_000001", 0, 40)
    by_group = {g["group"]: g for g in page["groups"]}
    assert by_group["g1"]["zero_spread"] and by_group["g1"]["spread"] == 0.0
    # the failed sample (no advantage) is not compared: spread 1.0 over the two that are
    assert not by_group["g2"]["zero_spread"] and by_group["g2"]["spread"] == 1.0
    assert by_group["g2"]["in_baseline"] == 2 and page["zero_spread"] == 1


def test_filters_by_status_reward_agent_tool_and_text(run):
    rows = run.index(run.episode_set("step_000001"))

    def kept(**given):
        return sorted(r["episode_id"] for r in rows if Filters(**given).keep(r))

    assert kept(status="timeout") == ["m2"]
    assert kept(reward_min=0.5, tool="calculate") == ["f0", "f1", "f2", "m0"]
    assert kept(reward_max=0.5) == ["m1", "m2"]
    assert kept(agent="b") == ["m1"]
    assert kept(text="answer is 0") == ["m1"]


def test_two_evaluations_compare_on_the_tasks_both_ran(run):
    result = compare_sets(run, "eval/before", run, "eval/after")
    assert [t["task_id"] for t in result["tasks"]] == ["t1"]
    assert result["tasks"][0]["delta"] == 1.0 and (result["only_a"], result["only_b"]) == (1, 1)


def test_the_routes_answer_json_and_name_what_is_missing(run):
    from starlette.testclient import TestClient

    from aworld_train.viewer.server import build_app

    client = TestClient(build_app([run.path]))
    overview = client.get("/api/runs/0").json()
    assert [s["name"] for s in overview["sets"]] == ["step_000001", "eval/before", "eval/after"]
    page = client.get("/api/runs/0/episodes", params={"set": "step_000001", "status": "ok"}).json()
    assert (page["matched"], page["total"]) == (5, 6)
    missing = client.get("/api/runs/0/episode", params={"set": "step_000009", "id": "x"})
    assert missing.status_code == 404 and "no episode set 'step_000009'" in missing.json()["error"]
    assert client.get("/").text.startswith("<!doctype html>")
    assert "function route" in client.get("/static/app.js").text


def test_view_refuses_what_is_not_a_run_folder_before_serving(tmp_path, capsys):
    from aworld_train.facade.cli import main

    assert main(["view", str(tmp_path / "nowhere")]) == 2
    assert "RUN_DIR" in capsys.readouterr().err
    assert main(["view", str(tmp_path)]) == 2
    assert "is not a run folder" in capsys.readouterr().err


def test_the_viewer_reads_token_files_and_older_trajectory_files(tmp_path):
    from aworld_train.viewer.store import Run
    from aworld_train.viewer.views import episode_view

    run_dir = tmp_path / "run"
    write_episodes(run_dir / "tokens", "step_000001", [team_episode()], "train", 1)
    # an older folder's files: trajectories without tokens, and an evaluation that kept the ledger
    (run_dir / "trajectories").mkdir()
    old = team_episode().to_dict(with_tokens=False)
    (run_dir / "trajectories" / "step_000002.jsonl").write_text(json.dumps(old) + '\n{"episode_id": "cut')
    (run_dir / "eval").mkdir()
    (run_dir / "eval" / "before.jsonl").write_text(json.dumps(team_episode().to_dict()) + "\n")
    run = Run(run_dir)
    sets = {s.name: s for s in run.sets()}
    assert list(sets) == ["step_000001", "step_000002", "eval/before"]
    assert sets["step_000001"].has_token_files and not sets["step_000002"].has_token_files
    assert [r["episode_id"] for r in run.index(sets["step_000002"])] == ["e1"]  # the cut line is skipped

    class NoTokenizer:
        reason = "no tokenizer here"

        def pieces(self, ids):
            return None

        def status(self):
            return {"ok": False, "reason": self.reason}

    view = episode_view(run, NoTokenizer(), "step_000002", "e1")
    assert not view["tokens"]["available"] and "written before" in view["tokens"]["reason"]
    view = episode_view(run, NoTokenizer(), "eval/before", "e1")
    planner = view["lanes"][0]["segments"][0]["tokens"]
    # the old file's 0.0 at template positions is shown as what it is: no logprob
    assert [t[3] for t in planner[3:]] == [-0.1, -0.2, None, None, -0.3]
    view = episode_view(run, NoTokenizer(), "step_000001", "e1")
    assert [lane["agent"] for lane in view["lanes"]] == ["planner", "solver"]
    assert [c["name"] for c in view["lanes"][1]["tool_calls"]] == ["search"]


class _Pieces:
    """The run tokenizer's part the episode view reads, over a loaded tokenizer."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def pieces(self, ids):
        return [self.tokenizer.decode([i], clean_up_tokenization_spaces=False) for i in ids]

    def status(self):
        return {"ok": True, "reason": None}


@pytest.mark.parametrize("kind", ["trims", "summarises"])
def test_an_episode_shows_each_rewrite_of_its_history(tmp_path, tokenizer, kind):
    """Each segment after an agent's first says where the rewrite happened (the agent's call it
    began at) and what it did to the history: the spans dropped and the text that replaced them,
    naming a summary the policy wrote where it reappears."""
    from rewriting_agents import SUMMARY, rewriting_episode

    from aworld_train.viewer.store import Run
    from aworld_train.viewer.views import episode_view

    traj = rewriting_episode(kind, tokenizer)
    write_episodes(tmp_path / "tokens", "step_000001", [traj], "train", 1)
    (lane,) = episode_view(Run(tmp_path), _Pieces(tokenizer), "step_000001", "rewrites")["lanes"]
    segments = lane["segments"]
    assert [s["index"] for s in segments] == [0, 1, 2] and segments[0]["rewrite"] is None
    assert [s["first_call"] for s in segments] == [0, 2, 3]
    for seg, before, after in zip(segments[1:], traj.segments[:-1], traj.segments[1:], strict=True):
        rewrite = seg["rewrite"]
        # kept and dropped cover the history before it, kept and added the new prompt
        assert rewrite["kept"] + rewrite["dropped_tokens"] == len(before.ids)
        assert rewrite["kept"] + rewrite["added_tokens"] == len(after.prompt_ids)
    dropped = "".join(s["text"] for s in segments[1]["rewrite"]["dropped"])
    added = segments[2]["rewrite"]["added"]
    if kind == "trims":  # its first exchange is gone, the second's result came in
        assert "The result of 2 * 3 is 6." in dropped
        assert any("The result of 6 + 4 is 10." in s["text"] for s in segments[1]["rewrite"]["added"])
    else:  # the summary the policy wrote in segment 2 replaced the history
        assert "The result of 2 * 3 is 6." in dropped
        (summary,) = [s for s in added if SUMMARY in s["text"]]
        assert summary["sampled_in"] == [{"segment": 1, "turn": 0}]
