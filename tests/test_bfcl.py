"""BFCL multi-turn: catalog and data, the MCP server's per-episode worlds, the rewards against
bfcl-eval's own checker, and real AWorld episodes replaying possible answers."""

from __future__ import annotations

import json
import uuid

import pytest

pytest.importorskip("bfcl_eval", reason="bfcl-eval is installed by `make setup` (pip install --no-deps)")

from aworld_train.core.errors import RewardError  # noqa: E402
from aworld_train.core.protocol import EPISODE_HEADER, TASK_HEADER, TURN_HEADER  # noqa: E402
from aworld_train.env.bfcl import catalog  # noqa: E402
from aworld_train.env.bfcl.data import build_rows, split  # noqa: E402
from aworld_train.inputs.reward import RewardFunction  # noqa: E402
from aworld_train.rewards.bfcl import checker, combined, format_reward, official_check, progress  # noqa: E402
from aworld_train.rewards.bfcl_replay import bfcl_results, replay  # noqa: E402
from aworld_train.rollout.episodes.trajectory import ToolCallRecord, Trajectory  # noqa: E402

MISS = "multi_turn_miss_func_0"  # `sort` is held back until turn 3


def sample(entry_id: str) -> dict:
    return {"id": entry_id, "ground_truth": json.dumps(catalog.possible_answer(entry_id))}


@pytest.fixture(scope="module")
def bfcl_server():
    from aworld_train.env.launcher import start_server

    server = start_server("bfcl")
    yield server
    server.stop()


async def list_tool_names(url: str, episode: str, entry_id: str, turn: int) -> list[str]:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    headers = {EPISODE_HEADER: episode, TASK_HEADER: entry_id, TURN_HEADER: str(turn)}
    async with streamablehttp_client(url, headers=headers) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return [t.name for t in (await session.list_tools()).tools]


# -- catalog and data ------------------------------------------------------------------
def test_rows_and_the_seeded_split():
    rows = build_rows()
    assert len(rows) == 800 and len({r["id"] for r in rows}) == 800
    miss = next(r for r in rows if r["id"] == MISS)
    assert len(miss["prompt"]) == len(json.loads(miss["ground_truth"])) == 5
    from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC as REVEAL

    assert miss["prompt"][3] == REVEAL  # the turn that only reveals functions gets BFCL's own message
    train, held_out = split(rows, 400, seed=0)
    assert len(train) == 400 and len(held_out) == 400
    assert {r["id"] for r in train}.isdisjoint(r["id"] for r in held_out)
    assert sorted(r["category"] for r in train).count("base") == 100
    assert [r["id"] for r in split(rows, 400, seed=0)[0]] == [r["id"] for r in train]
    assert [r["id"] for r in split(rows, 400, seed=1)[0]] != [r["id"] for r in train]
    from aworld_train.inputs.dataset import load_tasks

    tasks = load_tasks(train[:3])
    assert tasks[0].id == train[0]["id"] and tasks[0].user_turns == train[0]["prompt"]


def test_verl_rows_keep_the_entry_id_the_server_and_reward_need(tmp_path):
    import pyarrow.parquet as pq

    from aworld_train.engines.verl.loop import task_from_row
    from aworld_train.engines.verl.render import write_parquet
    from aworld_train.inputs.dataset import load_tasks

    rows = [r for r in build_rows(["miss_func"]) if r["id"] == MISS]
    write_parquet(load_tasks(rows), tmp_path / "train.parquet")
    task = task_from_row(pq.read_table(tmp_path / "train.parquet").to_pylist()[0])
    assert task.id == MISS and task.user_turns == rows[0]["prompt"]
    assert task.sample()["task_id"] == MISS and json.loads(task.ground_truth) == catalog.possible_answer(MISS)


def test_unknown_entries_are_named():
    with pytest.raises(KeyError, match="not a BFCL multi-turn entry id"):
        catalog.entry("simple_python_3")
    with pytest.raises(KeyError, match="no entry"):
        catalog.entry("multi_turn_base_9999")


# -- the server --------------------------------------------------------------------------
async def test_held_back_functions_appear_at_their_turn(bfcl_server):
    episode = uuid.uuid4().hex
    before = await list_tool_names(bfcl_server.url, episode, MISS, 2)
    after = await list_tool_names(bfcl_server.url, episode, MISS, 3)
    assert "sort" not in before and set(after) - set(before) == {"sort"}
    base = await list_tool_names(bfcl_server.url, uuid.uuid4().hex, "multi_turn_base_0", 0)
    assert "sort" in base and "post_tweet" in base and "add" not in base  # only the entry's classes
    early = await replay(bfcl_server.url, MISS, [[], [], ["sort('final_report.pdf')"]])
    assert early.tool_calls[0].error and "'sort' is not available" in early.tool_calls[0].result


async def test_tool_errors_come_back_as_bfcl_raises_them(bfcl_server):
    traj = await replay(bfcl_server.url, "multi_turn_base_0", [["cd(folder='nowhere')", "mkdir(name='x')"]])
    assert traj.tool_calls[0].result == bfcl_results("multi_turn_base_0", [["cd(folder='nowhere')"]])[0]
    assert traj.tool_calls[1].error
    assert traj.tool_calls[1].result.startswith("Error during execution: ")
    assert "unexpected keyword argument 'name'" in traj.tool_calls[1].result


def test_actionable_feedback_adds_a_usage_hint():
    from aworld_train.env.bfcl.state import EpisodeWorld, ToolCallError

    with pytest.raises(ToolCallError, match=r"Hint: mkdir\(dir_name: string\)"):
        EpisodeWorld("multi_turn_base_0", hints=True).call("mkdir", {"name": "x"}, 0)
    with pytest.raises(ToolCallError) as plain:
        EpisodeWorld("multi_turn_base_0").call("mkdir", {"name": "x"}, 0)
    assert "Hint" not in str(plain.value)
    refused = EpisodeWorld("multi_turn_base_0", hints=True).call("cd", {"folder": "nowhere"}, 0)
    assert '"error"' in refused and refused.endswith("Hint: cd(folder: string)")
    assert "Hint" not in EpisodeWorld("multi_turn_base_0").call("cd", {"folder": "nowhere"}, 0)


# -- ground-truth replay and the reward ---------------------------------------------------
SAMPLE = [f"multi_turn_base_{i}" for i in range(0, 200, 8)] + [MISS, "multi_turn_miss_param_3"]


async def test_ground_truth_replay_scores_1_and_agrees_with_bfcl_eval(bfcl_server):
    """A sample here; bench/bfcl_replay.py runs every entry (figures in docs/BENCHMARKS.md)."""
    for entry_id in SAMPLE:
        truth = catalog.possible_answer(entry_id)
        traj = await replay(bfcl_server.url, entry_id, truth)
        assert [c.result for c in traj.tool_calls] == bfcl_results(entry_id, truth), entry_id
        ours = checker(traj, sample(entry_id))
        official = official_check([[[c] for c in t] for t in truth], catalog.entry(entry_id), truth)
        assert official["valid"] and ours["score"] == 1.0, (entry_id, ours)
        assert ours["progress"] == 1.0 and ours["format"] == 1.0


async def test_a_perturbed_sequence_scores_below_1(bfcl_server):
    entry_id = "multi_turn_base_0"
    truth = catalog.possible_answer(entry_id)
    dropped = [list(t) for t in truth]
    dropped[-1].pop()  # the final diff
    traj = await replay(bfcl_server.url, entry_id, dropped)
    scored = checker(traj, sample(entry_id))
    assert scored["score"] == 0.0 and scored["progress"] == pytest.approx(3 / 4)
    changed = [list(t) for t in truth]
    changed[0][1] = "mkdir(dir_name='tmp')"
    scored = checker(await replay(bfcl_server.url, entry_id, changed), sample(entry_id))
    assert scored["score"] == 0.0 and scored["progress"] == 0.0
    assert scored["error_type"] == "multi_turn:instance_state_mismatch"


async def test_an_episode_that_stopped_early_is_force_terminated(bfcl_server):
    entry_id = "multi_turn_base_0"
    truth = catalog.possible_answer(entry_id)
    scored = checker(await replay(bfcl_server.url, entry_id, truth[:2]), sample(entry_id))
    assert scored["score"] == 0.0 and scored["progress"] == pytest.approx(2 / 4)
    assert scored["error_type"] == "multi_turn:force_terminated"


def test_format_reward_and_weights():
    def traj(*calls: tuple[str, dict]) -> Trajectory:
        records = [ToolCallRecord(f"c{i}", n, a, "x", False, i, 0) for i, (n, a) in enumerate(calls)]
        return Trajectory("e", "t", tool_calls=records, user_turns=4)

    s = sample("multi_turn_base_0")
    bad = traj(("cd", {"folder": "document"}), ("mkdir", {"name": "temp"}), ("teleport", {}))
    assert format_reward(bad, s)["score"] == pytest.approx(1 / 3)
    assert format_reward(traj(), s)["score"] == 0.0
    assert progress(bad, s)["score"] == 0.0
    mixed = combined(bad, s, weights={"format": 0.5, "checker": 1.0})
    assert mixed["score"] == pytest.approx(0.5 / 3) and mixed["checker"] == 0.0
    with pytest.raises(ValueError, match="unknown part"):
        combined(bad, s, weights={"style": 1.0})
    # weights come from the config's reward.kwargs, checked when the reward is loaded
    loaded = RewardFunction.load("aworld_train.rewards.bfcl:combined", kwargs={"weights": {"format": 2.0}})
    assert loaded(bad, s)[0] == pytest.approx(2 / 3)
    with pytest.raises(RewardError, match="reward.kwargs"):
        RewardFunction.load("aworld_train.rewards.bfcl:checker", kwargs={"weights": {}})


def test_reward_kwargs_in_the_config():
    from aworld_train.inputs.config import load_config

    cfg = load_config(
        {"reward": {"fn": "aworld_train.rewards.bfcl:combined", "kwargs": {"weights": {"progress": 1}}}}
    )
    assert cfg.reward.kwargs == {"weights": {"progress": 1}}


# -- the curriculum configs -------------------------------------------------------------------
def test_curriculum_configs_load_and_chain():
    from pathlib import Path

    from aworld_train.inputs.config import load_config
    from aworld_train.inputs.reward import RewardFunction

    root = Path(__file__).resolve().parents[1] / "examples" / "bfcl"
    stages = [load_config(root / f) for f in ("stage1_format.yaml", "stage2_base.yaml", "stage3_full.yaml")]
    assert [s.backend for s in stages] == ["verl"] * 3
    for previous, stage in zip(stages, stages[1:], strict=False):
        # stage k starts from the transformers folder of stage k-1's last saved step
        last = (
            f"{previous.trainer.run_dir}/checkpoints/global_step_{previous.trainer.steps}/actor/huggingface"
        )
        assert stage.model == last and previous.trainer.steps % previous.trainer.save_every == 0
        assert "hf_model" in previous.verl["actor_rollout_ref"]["actor"]["checkpoint"]["save_contents"]
    assert stages[2].env[0].env == {"AWORLD_TRAIN_BFCL_HINTS": "1"}  # actionable feedback
    local = load_config(root / "grpo_local.yaml")
    assert local.backend == "local" and [e.name for e in local.env] == ["bfcl"]
    for cfg in [*stages, local]:
        RewardFunction.load(cfg.reward.fn, kwargs=cfg.reward.kwargs)  # the weights fit the function
