"""Multi-turn SFT: samples tokenized through the RL ledger, loss on assistant tokens only, the
local backend's checkpoint a `model:` for GRPO, and a run rendered for verl's SFT trainer."""

from __future__ import annotations

import json

import pytest
import torch

from aworld_train.core.errors import ConfigError, DatasetError
from aworld_train.inputs.config import load_config
from aworld_train.rollout.samples.sft_data import (
    conversation_messages,
    conversation_samples,
    load_sft_data,
    trajectory_samples,
)
from aworld_train.rollout.tokens.templates.renderer import ChatRenderer

AGENTGYM = {
    "item_id": "textcraft_3",
    "conversations": [
        {"from": "human", "value": "You are a crafting agent. Reply with one action per turn.", "loss": None},
        {"from": "gpt", "value": "OK", "loss": False},
        {"from": "human", "value": "Goal: craft 1 stick. Inventory: 2 planks."},
        {
            "from": "gpt",
            "value": "Thought: sticks come from planks.\nAction: craft 4 stick using 2 planks",
            "loss": True,
        },
        {"from": "human", "value": "Crafted 4 minecraft:stick"},
        {"from": "gpt", "value": "Action: done", "loss": True},
    ],
}


@pytest.fixture(scope="module")
def renderer(tokenizer):
    return ChatRenderer(tokenizer, tool_block="never")


def test_only_assistant_tokens_carry_loss(renderer, tokenizer, im_end):
    messages = conversation_messages(AGENTGYM, system="You play TextCraft.")
    [sample] = conversation_samples(messages, renderer, im_end)
    assert len(sample.ids) == len(sample.mask)
    # the loss tokens are exactly the two trained assistant turns, each closed by its stop token
    spans, current = [], []
    for token, m in zip(sample.ids, sample.mask, strict=True):
        if m:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    if current:
        spans.append(current)
    texts = [tokenizer.decode(s) for s in spans]
    assert texts == [
        "Thought: sticks come from planks.\nAction: craft 4 stick using 2 planks<|im_end|>",
        "Action: done<|im_end|>",
    ]
    # no user, system or template text is a target; the `loss: false` "OK" turn is not either
    untrained = tokenizer.decode([t for t, m in zip(sample.ids, sample.mask, strict=True) if not m])
    assert (
        "Goal: craft 1 stick" in untrained
        and "OK<|im_end|>" in untrained
        and "<|im_start|>assistant" in untrained
    )
    # the ids are the ledger's: the prompt a policy would get first is the renderer's own prompt
    first_prompt = renderer.render_prompt(messages[:2], None)
    assert sample.ids[: len(first_prompt)] == first_prompt


def test_trajectory_segments_are_taken_as_recorded():
    record = {
        "task_id": "t",
        "reward": 1.0,
        "status": "ok",
        "segments": [{"prompt_ids": [1, 2, 3], "response_ids": [4, 5, 6, 7], "response_mask": [1, 1, 0, 1]}],
    }
    [sample] = trajectory_samples(record)
    assert sample.ids == [1, 2, 3, 4, 5, 6, 7] and sample.mask == [0, 0, 0, 1, 1, 0, 1]

    # a team's trajectory: each agent's segment is a sample that keeps the agent's name
    team = {
        **record,
        "segments": [
            {**record["segments"][0], "agent": "planner"},
            {**record["segments"][0], "agent": "solver"},
        ],
    }
    assert [s.agent for s in trajectory_samples(team)] == ["planner", "solver"]


def test_filters_keep_correct_trajectories(tmp_path, renderer, im_end):
    seg = {"prompt_ids": [1, 2], "response_ids": [3], "response_mask": [1]}
    rows = [
        {"task_id": "a", "reward": 1.0, "status": "ok", "segments": [seg]},
        {"task_id": "b", "reward": 0.0, "status": "ok", "segments": [seg]},
        {"task_id": "c", "reward": None, "status": "timeout", "segments": [seg]},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    agentgym = tmp_path / "a.json"
    agentgym.write_text(json.dumps([AGENTGYM]))
    data = load_sft_data([str(path), str(agentgym)], renderer, im_end)
    assert (
        data.counts["kept"] == 2
        and data.counts["left_out_incorrect"] == 1
        and data.counts["left_out_failed"] == 1
    )
    every = load_sft_data([str(path)], renderer, im_end, only_correct=False)
    assert len(every.samples) == 2
    with pytest.raises(DatasetError, match="sft.data is empty"):
        load_sft_data([], renderer, im_end)
    with pytest.raises(DatasetError, match="unknown speaker"):
        load_sft_data(
            [str(_write(tmp_path, {"item_id": 1, "conversations": [{"from": "bot", "value": "x"}]}))],
            renderer,
            im_end,
        )


def _write(tmp_path, record) -> object:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(record) + "\n")
    return path


def test_sft_config_refuses_unknown_keys():
    with pytest.raises(ConfigError, match="unknown config key 'sft.epoch'"):
        load_config({"sft": {"epoch": 2}})


def test_loss_is_the_mean_over_assistant_targets_only(tiny_model_dir):
    from aworld_train.engines.local.sft import collate, token_nll
    from aworld_train.rollout.policies.models import load_model
    from aworld_train.rollout.samples.sft_data import SFTSample

    model = load_model(str(tiny_model_dir), dtype=torch.float32)
    sample = SFTSample([5, 6, 7, 8, 9, 10], [0, 0, 0, 1, 1, 0])
    batch = collate([sample], 0, "cpu")
    nll = token_nll(model, batch)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([sample.ids])).logits[0]
    logp = torch.log_softmax(logits.float(), -1)
    expected = -(logp[2, 8] + logp[3, 9])  # targets 8 and 9, predicted from positions 2 and 3
    assert float(nll) == pytest.approx(float(expected), rel=1e-4)


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory, tiny_model_dir):
    """One short local SFT run on the tiny model, shared by the assertions below."""
    from aworld_train.facade.sft import run_sft

    folder = tmp_path_factory.mktemp("sft")
    data = folder / "agentgym.jsonl"
    data.write_text(json.dumps(AGENTGYM) + "\n")
    cfg = {
        "model": str(tiny_model_dir),
        "rollout": {"tool_block": "never"},
        "sft": {
            "data": [str(data)],
            "epochs": 12,
            "batch_size": 1,
            "lr": 3.0e-3,
            "run_dir": str(folder / "run"),
        },
    }
    return run_sft(cfg, log=lambda *_: None), folder


def test_local_sft_learns_and_writes_a_grpo_model(sft_run):
    result, folder = sft_run
    assert result["steps"] == 12 and result["loss_last"] < 0.5 * result["loss_first"]
    checkpoint = result["checkpoint"]
    cfg = load_config("examples/calculator/grpo_local.yaml", [f"model={checkpoint}"])
    from aworld_train.rollout.policies.models import check_model, load_model, load_tokenizer

    assert check_model(cfg.model) and load_model(cfg.model) is not None
    assert load_tokenizer(cfg.model).eos_token == "<|im_end|>"
    rows = [json.loads(x) for x in (folder / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 13)) and all(r["phase"] == "sft" for r in rows)


def test_verl_render_is_accepted_by_verl(tmp_path, tiny_model_dir, tokenizer):
    """The rendered config is verl's own composition; verl's dataset factory loads our class
    from it and yields exactly our ids and loss mask."""
    pytest.importorskip("verl")
    from omegaconf import OmegaConf
    from verl.trainer.sft_trainer import create_sft_dataset
    from verl.utils.config import omega_conf_to_dataclass

    from aworld_train.facade.sft import build_samples, run_sft

    data = tmp_path / "agentgym.json"
    data.write_text(json.dumps([AGENTGYM, {**AGENTGYM, "item_id": "textcraft_4"}]))
    cfg = {
        "model": str(tiny_model_dir),
        "rollout": {"tool_block": "never"},
        "sft": {
            "data": [str(data)],
            "backend": "verl",
            "run_dir": str(tmp_path / "run"),
            "max_length": 512,
            "verl": {"trainer": {"n_gpus_per_node": 2}, "optim": {"lr_scheduler_type": "cosine"}},
        },
    }
    result = run_sft(cfg, render_only=True, log=lambda *_: None)
    assert "verl.trainer.sft_trainer" in result["command"] and "--nproc_per_node=2" in result["command"]
    final = OmegaConf.load(result["config"])
    assert final.optim.lr_scheduler_type == "cosine" and final.model.path == str(tiny_model_dir)
    optim = omega_conf_to_dataclass(final.optim)
    assert optim.lr == pytest.approx(1.0e-5)
    # verl's own dataclasses take the model, engine and checkpoint sections as rendered
    assert omega_conf_to_dataclass(final.model).path == str(tiny_model_dir)
    omega_conf_to_dataclass(final.engine)
    assert "hf_model" in omega_conf_to_dataclass(final.checkpoint).save_contents
    dataset = create_sft_dataset(final.data.train_files, final.data, tokenizer, None)
    ours = build_samples(load_config(cfg)).samples
    assert len(dataset) == len(ours) == 2
    item = dataset[0]
    assert item["input_ids"].tolist() == ours[0].ids and item["loss_mask"].tolist() == ours[0].mask
    with pytest.raises(ConfigError, match="sft.verl"):
        run_sft(
            {**cfg, "sft": {**cfg["sft"], "verl": {"data": {"nope": 1}}}},
            render_only=True,
            log=lambda *_: None,
        )
