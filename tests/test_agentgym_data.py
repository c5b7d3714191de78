"""AgentGym's task lists and trajectory files (item_id, conversations) as our rows."""

from __future__ import annotations

import json

import pytest

from aworld_train.core.errors import DatasetError
from aworld_train.env.agentgym.data import ASK_INSTRUCTION, actions_of, convert, to_rows
from aworld_train.facade.cli import main
from aworld_train.inputs.dataset import load_tasks

TRAJECTORY = {
    "item_id": "textcraft_3",
    "conversations": [
        {"from": "human", "loss": None, "value": "You are given few useful crafting recipes..."},
        {"from": "gpt", "loss": False, "value": "OK. I'll follow your instructions and try my best."},
        {
            "from": "human",
            "loss": None,
            "value": "Crafting commands:\ncraft 4 birch planks using 1 birch logs"
            "\n\nGoal: craft birch planks.",
        },  # fmt: skip
        {"from": "gpt", "loss": True, "value": "Thought:\nI need logs.\n\nAction:\nget 1 birch logs"},
        {"from": "human", "loss": None, "value": "Got 1 birch logs"},
        {
            "from": "gpt",
            "loss": True,
            "value": "Thought:\nNow craft.\n\nAction:\ncraft 4 birch planks using 1 birch logs",
        },
        {"from": "human", "loss": None, "value": "Crafted 4 minecraft:birch_planks"},
    ],
}


def test_trajectories_and_task_lists_become_rows_the_loader_takes():
    rows = to_rows(
        [TRAJECTORY, {"item_id": "textcraft_12", "conversations": []}, 40, "textcraft_7"], "textcraft"
    )
    assert [r["id"] for r in rows] == ["textcraft_3", "textcraft_12", "textcraft_40", "textcraft_7"]
    assert rows[0]["prompt"].startswith("Crafting commands:") and rows[0]["actions"] == [
        "get 1 birch logs",
        "craft 4 birch planks using 1 birch logs",
    ]
    assert rows[0]["conversations"] == TRAJECTORY["conversations"]
    assert rows[1]["prompt"] == ASK_INSTRUCTION and rows[1]["extra_info"] == {
        "env": "textcraft",
        "item_id": "textcraft_12",
        "item": 12,
    }
    tasks = load_tasks(rows)
    assert [t.id for t in tasks] == [r["id"] for r in rows] and tasks[0].ground_truth is None
    assert tasks[0].data_source == "agentgym/textcraft"


def test_bad_records_name_the_field():
    with pytest.raises(DatasetError, match="no item id.*'item_id'"):
        to_rows([{"conversations": []}], "babyai")
    with pytest.raises(DatasetError, match="'conversations' must be a list"):
        to_rows([{"item_id": "babyai_1", "conversations": [{"role": "user"}]}], "babyai")


def test_actions_skip_the_preamble_and_turns_without_an_action():
    turns = TRAJECTORY["conversations"][:4] + [{"from": "gpt", "value": "no action here"}]
    assert actions_of(turns) == ["get 1 birch logs"]


def test_convert_command_with_a_seeded_split_by_item(tmp_path, capsys):
    source = tmp_path / "textcraft_train.json"
    source.write_text(json.dumps([TRAJECTORY] * 2 + [{"item_id": f"textcraft_{i}"} for i in range(10)]))
    out = tmp_path / "rows.jsonl"
    assert (
        main(
            ["data", "agentgym", str(source), "--env", "textcraft", "--output", str(out), "--held-out", "0.3"]
        )
        == 0
    )
    train = [json.loads(line) for line in out.read_text().splitlines()]
    test = [json.loads(line) for line in (tmp_path / "rows.test.jsonl").read_text().splitlines()]
    assert len(train) + len(test) == 12 and "rows written" in capsys.readouterr().out
    assert not {r["id"] for r in train} & {r["id"] for r in test}  # one item never on both sides
    again = tmp_path / "again.jsonl"
    assert convert(source, "textcraft", again, held_out=0.3) == {"train": len(train), "test": len(test)}
    assert again.read_text() == out.read_text()


def test_a_config_names_the_bridges_environment_and_server(monkeypatch):
    from aworld_train.core.errors import ConfigError
    from aworld_train.inputs.config import TrainConfig

    monkeypatch.delenv("AGENTGYM_ENV", raising=False)
    monkeypatch.delenv("AGENTGYM_SERVER", raising=False)
    ok = TrainConfig.model_validate(
        {"env": [{"name": "agentgym", "env": {"AGENTGYM_ENV": "babyai", "AGENTGYM_SERVER": "http://h:1"}}]}
    )
    assert ok.env[0].env["AGENTGYM_ENV"] == "babyai"
    with pytest.raises((ConfigError, ValueError), match="needs AGENTGYM_SERVER"):
        TrainConfig.model_validate({"env": [{"name": "agentgym", "env": {"AGENTGYM_ENV": "babyai"}}]})
