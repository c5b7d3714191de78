"""Our AReaL workflow driven the way AReaL drives it, with AReaL 1.0.4's own classes: the request
and response types, the workflow base class, the stats tracker and the padded-batch helpers. A
scripted engine stands in for the inference server (tests/areal_env/areal_workflow_support.py;
tests/test_areal_cpu_e2e.py runs the real one); the calculator MCP server is real."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import re

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest, ModelResponse
from areal.api.workflow_api import RolloutWorkflow
from areal_workflow_support import ONE_RAW, FakeEngine, check_layout, rows, workflow_like_areal
from backend_support import calculator_reply, trainer_for

from aworld_train.engines.areal.render import areal_fields


def test_areal_names_match_its_source():
    """The names the render and the workflow rely on, recorded from AReaL 1.0.4's source into
    fields.json (what our environment checks native keys against), are the installed AReaL's."""
    recorded = areal_fields()
    assert recorded["areal_version"] == "1.0.4"
    interface = recorded["interface"]
    assert [f.name for f in dataclasses.fields(ModelRequest)] == interface["ModelRequest"]
    assert [f.name for f in dataclasses.fields(ModelResponse)] == interface["ModelResponse"]
    assert [f.name for f in dataclasses.fields(GenerationHyperparameters)] == list(
        recorded["fields"]["gconfig"]
    )
    assert (
        list(inspect.signature(RolloutWorkflow.arun_episode).parameters)
        == interface["RolloutWorkflow.arun_episode"]
    )
    assert interface["InferenceEngine.agenerate"] == ["self", "req"]


# -- the workflow, the way AReaL runs it ----------------------------------------------------------


@pytest.fixture
def areal_run(tmp_path, calculator_server, monkeypatch):
    monkeypatch.setenv("CALCULATOR_MCP_URL", calculator_server.url)
    config = {"backend": "areal", "rollout": {"tool_block": "never", "max_new_tokens": 64}}
    return trainer_for(tmp_path, config).render()


def test_workflow_gives_exact_ids_mask_logprobs_versions_and_reward(areal_run, tokenizer):
    workflow = workflow_like_areal(areal_run, **ONE_RAW)
    engine = FakeEngine(tokenizer, calculator_reply)
    batch = asyncio.run(workflow.arun_episode(engine, rows(areal_run)[1]))  # "What is 2 * 3?"
    check_layout(batch)
    assert batch["input_ids"].shape[0] == 1 and batch["rewards"].tolist() == [1.0]
    ids, mask = batch["input_ids"][0].tolist(), batch["loss_mask"][0].tolist()
    logprobs, versions = batch["logprobs"][0].tolist(), batch["versions"][0].tolist()
    assert len(engine.requests) == 2 and len({r.rid for r in engine.requests}) == 1  # sticky id
    assert all(r.gconfig.n_samples == 1 and r.gconfig.max_new_tokens == 64 for r in engine.requests)
    # every prompt sent is a prefix of the trained sequence; the first one carries no loss
    for request in engine.requests:
        assert ids[: len(request.input_ids)] == request.input_ids
    first = len(engine.requests[0].input_ids)
    assert set(mask[:first]) == {0} and set(versions[:first]) == {-1}
    # per turn: the mask-1 tokens are exactly what the engine sampled, with its logprobs and version
    for turn, (request, out) in enumerate(zip(engine.requests, engine.outputs, strict=True), start=1):
        start = len(request.input_ids)
        span = slice(start, start + len(out))
        assert ids[span] == out and set(mask[span]) == {1} and set(versions[span]) == {turn}
        assert logprobs[span] == pytest.approx([-0.01 * (i + 1) for i in range(len(out))])
    # the tool result between the turns is template delta: no loss, no version
    delta = slice(first + len(engine.outputs[0]), len(engine.requests[1].input_ids))
    assert set(mask[delta]) == {0} and set(versions[delta]) == {-1}
    assert "<tool_response>\n6\n</tool_response>" in tokenizer.decode(ids[delta])
    assert sum(mask) == sum(len(o) for o in engine.outputs)


def test_a_task_runs_its_group_and_gets_group_normalised_rewards(areal_run, tokenizer):
    """AReaL asks once per task; the workflow runs the group and returns one padded batch whose
    rewards are GRPO's advantages (AReaL's own normalisation is off)."""
    from aworld_train.rollout.samples.codec import group_advantages

    workflow = workflow_like_areal(areal_run)
    replies = iter(["The answer is 9."] * 2 + [None] * 10)

    def reply(prompt):  # two samples answer at once (wrong), the rest use the tool (right)
        text = next(replies)
        return text if text else calculator_reply(prompt)

    batch = asyncio.run(workflow.arun_episode(FakeEngine(tokenizer, reply), rows(areal_run)[1]))
    check_layout(batch)
    assert batch["input_ids"].shape[0] == workflow.group_size == 4
    assert sorted(batch["rewards"].tolist()) == pytest.approx(sorted(group_advantages([0, 0, 1, 1], [0] * 4)))
    lengths = batch["attention_mask"].sum(1).tolist()
    assert all(set(m[:n].tolist()) == {1} for m, n in zip(batch["attention_mask"], lengths, strict=True))


def test_gigpo_gives_each_turn_a_row_with_its_own_advantage(
    tmp_path, calculator_server, monkeypatch, tokenizer
):
    """`algorithm.advantage: gigpo`: a row per turn, its loss on that turn's sampled tokens only, its
    reward the turn's advantage. Two samples answer at once (wrong), two call the tool and answer
    right: returns 0, 0, 1, 1 (mean 1/2, std 1/sqrt(3)): episode level -+sqrt(3)/2; the question is
    one state for all four (G_0 0, 0, 1, 1: the same -+sqrt(3)/2 again); the tool result "6" is one
    state for the two that called (G_1 1, 1: no spread, 0)."""
    monkeypatch.setenv("CALCULATOR_MCP_URL", calculator_server.url)
    config = {"backend": "areal", "rollout": {"tool_block": "never", "max_new_tokens": 64}}
    run = trainer_for(tmp_path, {**config, "algorithm": {"advantage": "gigpo"}}).render()
    workflow = workflow_like_areal(run)
    replies = iter(["The answer is 9."] * 2 + [None] * 10)

    def reply(prompt):
        text = next(replies)
        return text if text else calculator_reply(prompt)

    engine = FakeEngine(tokenizer, reply)
    batch = asyncio.run(workflow.arun_episode(engine, rows(run)[1]))  # "What is 2 * 3?"
    check_layout(batch)
    half = 3**0.5 / 2
    assert sorted(batch["rewards"].tolist()) == pytest.approx(
        sorted([-2 * half] * 2 + [2 * half, half] * 2), abs=1e-5
    )
    # each row's loss tokens are exactly one engine call's output, and the row ends where that call's
    # turn ends: its ids are the ledger's, a prefix of the episode's whole row
    outputs = {tuple(out) for out in engine.outputs}
    for i in range(batch["input_ids"].shape[0]):
        ids, mask = batch["input_ids"][i].tolist(), batch["loss_mask"][i].tolist()
        sampled = tuple(t for t, m in zip(ids, mask, strict=True) if m)
        assert sampled in outputs
    # the answer turn's row (reward sqrt(3)/2) holds the tool call's turn before it, without loss
    answers = [i for i, r in enumerate(batch["rewards"].tolist()) if r == pytest.approx(half, abs=1e-5)]
    for i in answers:
        ids, mask = batch["input_ids"][i].tolist(), batch["loss_mask"][i].tolist()
        assert "<tool_call>" in tokenizer.decode(ids) and "<tool_call>" not in tokenizer.decode(
            [t for t, m in zip(ids, mask, strict=True) if m]
        )


def test_a_failed_episode_is_outside_its_groups_baseline(areal_run, tokenizer):
    """One episode of the group loses its server: no row for it, and the others' rewards are the
    advantages of the group without it; every episode's raw reward and status reach AReaL's stats."""
    from areal.utils import stats_tracker

    from aworld_train.rollout.samples.codec import group_advantages

    calls = iter(range(100))

    def reply(prompt):  # the first call fails; two answer wrong at once; one uses the tool
        n = next(calls)
        if n == 0:
            raise RuntimeError("server lost")
        return "The answer is 9." if n in (1, 2) else calculator_reply(prompt)

    tracker = stats_tracker.get("rollout")
    tracker.export(reset=True)  # what earlier tests recorded
    workflow = workflow_like_areal(areal_run)
    batch = asyncio.run(workflow.arun_episode(FakeEngine(tokenizer, reply), rows(areal_run)[1]))
    check_layout(batch)
    assert batch["input_ids"].shape[0] == 3
    assert sorted(batch["rewards"].tolist()) == pytest.approx(sorted(group_advantages([0, 0, 1], [0] * 3)))
    assert all(batch["loss_mask"].sum(1) > 0)
    # what AReaL's rollout controller reads: each key's mean over the episodes, with its count
    stats = tracker.export(reset=True)
    assert stats["rollout/reward"] == pytest.approx(0.25) and stats["rollout/reward__count"] == 4
    assert stats["rollout/status/error"] == pytest.approx(0.25) and stats[
        "rollout/status/ok"
    ] == pytest.approx(0.75)
    assert stats["rollout/status/error__count"] == stats["rollout/status/ok__count"] == 4
    # the oldest version each episode that sampled saw (the engine's version rises per call: 1, 2, 3)
    assert (
        stats["rollout/weight_version"] == pytest.approx(2.0) and stats["rollout/weight_version__count"] == 3
    )


def test_failed_episode_carries_no_loss(areal_run, tokenizer):
    def server_lost(_):
        raise RuntimeError("server lost")

    # training: a group where every episode failed gives AReaL nothing to train on
    workflow = workflow_like_areal(areal_run)
    assert asyncio.run(workflow.arun_episode(FakeEngine(tokenizer, server_lost), rows(areal_run)[0])) is None
    # evaluation keeps the row, with no loss and reward 0
    workflow = workflow_like_areal(areal_run, **ONE_RAW)
    batch = asyncio.run(workflow.arun_episode(FakeEngine(tokenizer, server_lost), rows(areal_run)[0]))
    check_layout(batch)
    assert set(batch["loss_mask"][0].tolist()) == {0} and batch["rewards"].tolist() == [0.0]


def test_engine_without_a_version_per_token_is_an_error(areal_run, tokenizer):
    from aworld_train.engines.areal.workflow import ArealEnginePolicy
    from aworld_train.rollout.policies.client import SamplingParams

    class NoVersions(FakeEngine):
        async def agenerate(self, req):
            response = await super().agenerate(req)
            response.output_versions = []
            return response

    policy = ArealEnginePolicy(NoVersions(tokenizer, lambda _: "hi"), GenerationHyperparameters())
    with pytest.raises(RuntimeError, match="one of each per sampled token"):
        asyncio.run(policy.generate([1, 2, 3], SamplingParams(max_new_tokens=8)))


def test_the_workflow_loads_its_files_once_per_process(areal_run):
    """AReaL builds a workflow object per task: the tokenizer, spec and reward are not loaded again."""
    from aworld_train.engines.areal import workflow

    workflow_like_areal(areal_run)
    before = workflow._tokenizer.cache_info().misses, workflow._spec.cache_info().misses
    for _ in range(3):
        workflow_like_areal(areal_run)
    assert (workflow._tokenizer.cache_info().misses, workflow._spec.cache_info().misses) == before


def test_a_cpu_lora_run_makes_areals_requests_name_the_adapter(tmp_path):
    """AReaL's loader, on a rendered CPU run: with `actor.use_lora` its rollout names the adapter in
    every request (`rollout.use_lora`, which the CPU policy server requires), by gconfig's name;
    without it, none."""
    from aworld_train.engines.areal.config_check import load

    cpu = {"cluster": {"n_gpus_per_node": 0}}
    lora = load(
        trainer_for(tmp_path / "lora", {"backend": "areal", "areal": {**cpu, "actor": {"use_lora": True}}})
        .render()
        .config_path,
        [],
    )
    assert lora.actor.use_lora and lora.rollout.use_lora and lora.actor.weight_update_mode == "disk"
    assert lora.rollout.lora_name == lora.gconfig.lora_name == "default_lora"
    full = load(trainer_for(tmp_path / "full", {"backend": "areal", "areal": cpu}).render().config_path, [])
    assert not full.actor.use_lora and not full.rollout.use_lora


def test_areals_advantages_leave_a_failed_episode_out_of_its_group(tmp_path):
    """AReaL's own PPOActor, under our rendered config, turns the workflow's rows (each trained
    row's reward is its advantage over the group without its failed episode) into exactly those
    advantages: the render leaves no AReaL normalisation, discount or KL term between the two."""
    from areal.trainer.ppo.actor import PPOActor
    from areal.utils.data import concat_padded_tensors

    from aworld_train.engines.areal.config_check import load
    from aworld_train.rollout.samples.codec import group_advantages

    run = trainer_for(tmp_path, {"backend": "areal"}).render()
    config = load(run.config_path, [])
    raw = {"a": 1.0, "b": 0.0, "c": 1.0}  # a fourth episode of the group failed: it has no row
    advantages = dict(zip(raw, group_advantages(list(raw.values()), [0] * len(raw)), strict=True))

    def row(prompt: int, response: int, reward: float) -> dict[str, torch.Tensor]:
        length = prompt + response
        values = {
            "input_ids": torch.arange(1, length + 1, dtype=torch.int32),
            "loss_mask": torch.tensor([0] * prompt + [1] * response, dtype=torch.int32),
            "logprobs": torch.tensor([0.0] * prompt + [-0.5] * response, dtype=torch.float32),
            "versions": torch.tensor([-1] * prompt + [0] * response, dtype=torch.int32),
            "attention_mask": torch.ones(length, dtype=torch.bool),
            "rewards": torch.tensor(reward, dtype=torch.float32),
        }
        return {key: value.unsqueeze(0) for key, value in values.items()}

    shapes = {"a": (7, 5), "b": (7, 9), "c": (7, 3)}
    batch = concat_padded_tensors([row(*shapes[name], advantages[name]) for name in raw])
    batch["prox_logp"] = torch.roll(batch["logprobs"], shifts=-1, dims=-1)
    out = PPOActor(config.actor, engine=None)._compute_advantages(batch)
    for i, name in enumerate(raw):
        got = out["advantages"][i][out["loss_mask"][i].bool()]
        assert torch.allclose(got, torch.full_like(got, advantages[name]), atol=1e-5), name


def team_reply(planned):
    """The calculator pipeline's scripted model: the planner writes the next expression of `planned`;
    the calculator agent calls the tool on the planner's expression, then answers with its result."""

    def reply(prompt):
        if "Reply with the arithmetic expression" in prompt:
            return next(planned)
        # the calculator agent: its user message is the planner's expression
        tail = prompt[prompt.rindex("<|im_start|>user\n") :]
        results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", tail)
        if results:
            return f"The answer is {results[-1]}."
        expression = tail.split("\n")[1].removesuffix("<|im_end|>")
        return (
            "<tool_call>\n"
            + json.dumps({"name": "calculate", "arguments": {"expression": expression}})
            + "\n</tool_call>"
        )

    return reply


def test_a_teams_agents_each_train_on_their_own_rows_with_their_own_advantages(
    tmp_path, calculator_server, monkeypatch, tokenizer
):
    """The calculator pipeline (a planner, then the calculator agent): each episode gives one row per
    agent, each row is its agent's exact ledger with AReaL's versions, and GRPO compares a planner
    with the planners of the group, a calculator agent with the calculator agents."""
    from aworld_train.rollout.samples.codec import group_advantages

    monkeypatch.setenv("CALCULATOR_MCP_URL", calculator_server.url)
    config = {
        "backend": "areal",
        "rollout": {"tool_block": "never", "max_new_tokens": 64, "max_assistant_turns": 4},
    }
    run = trainer_for(tmp_path, config, agent="aworld_train.agents.calculator_team:build_pipeline").render()
    reply = team_reply(iter(["2 * 3", "2 * 3", "2 * 4", "2 * 3"]))  # the third planner gets it wrong

    from areal.utils import stats_tracker

    tracker = stats_tracker.get("rollout")
    tracker.export(reset=True)  # what earlier tests recorded
    workflow = workflow_like_areal(run, episodes_file=str(tmp_path / "episodes.jsonl"))
    engine = FakeEngine(tokenizer, reply)
    batch = asyncio.run(workflow.arun_episode(engine, rows(run)[1]))  # "What is 2 * 3?"
    stats = tracker.export(reset=True)
    assert stats["rollout/agent/planner/reward"] == pytest.approx(0.75)
    assert (
        stats["rollout/agent/calculator_agent/loss_tokens"] > stats["rollout/agent/planner/loss_tokens"] > 0
    )
    check_layout(batch)
    assert batch["input_ids"].shape[0] == 8  # 4 episodes x 2 agents
    episodes = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert [e["reward"] for e in episodes] == [1.0, 1.0, 0.0, 1.0]
    assert all(set(e["agents"]) == {"planner", "calculator_agent"} for e in episodes)
    for episode in episodes:
        # the versions the rows give AReaL (through our ledger) are those AReaL's engine returned;
        # the engine's version rises per call, so every episode's calls span several
        assert episode["versions"] == episode["engine_versions"] and episode["versions"]
        assert episode["min_version"] == min(map(int, episode["versions"]))
        assert episode["max_version"] == max(map(int, episode["versions"])) > episode["min_version"]
    # every row: its sampled tokens are some call's output, with that call's version
    for i in range(8):
        ids, mask, versions = (batch[k][i].tolist() for k in ("input_ids", "loss_mask", "versions"))
        assert all(v > 0 for v, m in zip(versions, mask, strict=True) if m)
        assert sum(mask) > 0 and sum(1 for v in versions if v > 0) == sum(mask)
    expected = group_advantages([1.0, 1.0, 0.0, 1.0], [0] * 4)
    assert sorted(batch["rewards"].tolist()) == pytest.approx(sorted(expected * 2))


def test_areals_patched_sources_are_the_ones_the_patches_were_written_for():
    """The request builders seeds.py wraps, and what it relies on, are AReaL 1.0.4's."""
    from aworld_train.core import upstream
    from aworld_train.core.patch_table import AREAL_PATCHES

    assert AREAL_PATCHES and upstream.changed(AREAL_PATCHES) == []
