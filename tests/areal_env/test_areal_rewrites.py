"""Agents that rewrite their own context train on AReaL (tests/rewriting_agents.py: one trims its
history, one replaces it by a summary its policy writes, one compacts its tool results): our
workflow, built as AReaL builds it, gives every segment a row with its tokens as sampled (mask,
logprobs, AReaL's versions), none dropped; each row's reward is its episode's advantage, computed
once per episode; AReaL's own PPOActor reads exactly that advantage on every trained token. The
local learner's and verl's side: tests/test_rewriting_agents.py."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict

import pyarrow.parquet as pq
import pytest
import torch
from areal.api.io_struct import ModelRequest, ModelResponse
from areal.utils import stats_tracker
from areal_workflow_support import check_layout, rows, workflow_like_areal
from backend_support import trainer_for
from rewriting_agents import KINDS, AnswerReward, RewritingAgent, replies

from aworld_train.rollout.episodes.runner import EpisodeRunner
from aworld_train.rollout.samples.codec import group_advantages

OUTCOMES = ("right", "wrong", "right", "wrong")


@pytest.fixture
def areal_run(tmp_path, calculator_server, monkeypatch):
    """A rendered AReaL run (its agent is replaced by a rewriting one below)."""
    monkeypatch.setenv("CALCULATOR_MCP_URL", calculator_server.url)
    config = {"backend": "areal", "rollout": {"tool_block": "never", "max_new_tokens": 64}}
    return trainer_for(tmp_path / "run", config).render()


class ScriptEngine:
    """AReaL's `agenerate`, each episode (its sticky request id) answered from a script of its own;
    a call's tokens carry the call's number as their version and logprobs of their own."""

    def __init__(self, tokenizer, scripts: list[list]) -> None:
        self.tokenizer, self.scripts = tokenizer, iter(scripts)
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.left: dict[str, list] = {}
        self.calls: dict[str, list[tuple[list[int], list[int], list[float], int]]] = defaultdict(list)

    async def agenerate(self, req: ModelRequest) -> ModelResponse:
        if req.rid not in self.left:
            self.left[req.rid] = list(next(self.scripts))
        step = self.left[req.rid].pop(0)
        if callable(step):
            step = step()
        ids = self.tokenizer.encode(step, add_special_tokens=False) + [self.end]
        version = len(self.calls[req.rid]) + 1
        logprobs = [-0.1 * version - 0.001 * i for i in range(len(ids))]
        self.calls[req.rid].append((list(req.input_ids), ids, logprobs, version))
        return ModelResponse(
            input_tokens=list(req.input_ids),
            output_tokens=ids,
            output_logprobs=logprobs,
            output_versions=[version] * len(ids),
            stop_reason="stop",
        )


def rewriting_workflow(run, kind: str, **overrides):
    """Our workflow as AReaL builds it, its agent the rewriting one (scored by its own answer)."""
    workflow = workflow_like_areal(run, **overrides)
    settings = workflow.settings.model_copy(update={"max_assistant_turns": 6})
    workflow.settings = settings
    workflow.runner = EpisodeRunner(RewritingAgent(kind), workflow.tokenizer, settings, AnswerReward())
    return workflow


def calls_in(row_ids: list[int], engine: ScriptEngine) -> list[tuple[int, list[int], list[float], int]]:
    """The engine's calls a row holds: (where its output starts, output, logprobs, version); a call
    two episodes made alike (the same prompt and answer) once."""
    found = {}
    for calls in engine.calls.values():
        for prompt, out, logprobs, version in calls:
            if row_ids[: len(prompt)] == prompt and row_ids[len(prompt) : len(prompt) + len(out)] == out:
                found[(len(prompt), tuple(out), version)] = (len(prompt), out, logprobs, version)
    return list(found.values())


@pytest.mark.parametrize("kind", KINDS)
def test_every_segment_is_a_row_with_its_tokens_as_sampled_and_its_episodes_advantage(
    kind, areal_run, tokenizer, tmp_path
):
    from areal.trainer.ppo.actor import PPOActor

    from aworld_train.engines.areal.config_check import load

    tracker = stats_tracker.get("rollout")
    tracker.export(reset=True)  # what earlier tests recorded
    workflow = rewriting_workflow(areal_run, kind, tokens_dir=str(tmp_path / "tokens"))
    engine = ScriptEngine(tokenizer, [replies(kind, outcome) for outcome in OUTCOMES])
    batch = asyncio.run(workflow.arun_episode(engine, rows(areal_run)[0]))
    check_layout(batch)
    # two right episodes in three segments each, two wrong ones in one: eight rows, none dropped
    assert batch["input_ids"].shape[0] == 8
    right, wrong = group_advantages([1.0, 0.0, 1.0, 0.0], [0] * 4)[:2]
    assert sorted(batch["rewards"].tolist()) == pytest.approx(sorted([right] * 6 + [wrong] * 2), abs=1e-5)
    held = []
    for i in range(8):
        n = int(batch["attention_mask"][i].sum())
        ids, mask = batch["input_ids"][i][:n].tolist(), batch["loss_mask"][i][:n].tolist()
        logprobs, versions = batch["logprobs"][i][:n].tolist(), batch["versions"][i][:n].tolist()
        # the calls sampled in this row (an earlier call can be context too: a later segment's prompt
        # holds the history the agent kept, re-rendered)
        spans = [span for span in calls_in(ids, engine) if span[0] >= mask.index(1)]
        trained = sorted(p for start, out, _, _ in spans for p in range(start, start + len(out)))
        assert trained == [p for p, m in enumerate(mask) if m]  # the loss is on sampled tokens only
        for start, out, call_logprobs, version in spans:
            assert versions[start : start + len(out)] == [version] * len(out)
            assert logprobs[start : start + len(out)] == pytest.approx(call_logprobs)
        held += [(start, tuple(out), version) for start, out, _, version in spans]
    # every call of every episode is in exactly one row
    made = [(len(c[0]), tuple(c[1]), c[3]) for calls in engine.calls.values() for c in calls]
    assert sorted(held) == sorted(made)
    # AReaL's own actor reads each row's reward as the advantage of every trained token
    config = load(areal_run.config_path, [])
    batch["prox_logp"] = torch.roll(batch["logprobs"], shifts=-1, dims=-1)
    out = PPOActor(config.actor, engine=None)._compute_advantages(dict(batch))
    for i in range(8):
        got = out["advantages"][i][out["loss_mask"][i].bool()]
        assert torch.allclose(got, torch.full_like(got, float(batch["rewards"][i])), atol=1e-5)
    stats = tracker.export(reset=True)
    assert stats["rollout/segments"] == pytest.approx(2.0) and stats["rollout/segments_dropped"] == 0.0
    # the token files give every trained segment its episode's advantage
    parts = sorted((tmp_path / "tokens").rglob("part-*.parquet"))
    episodes = [r for p in parts for r in pq.read_table(p).to_pylist()]
    segments = [(e["reward"], s["advantage"]) for e in episodes for s in e["segments"]]
    assert len(segments) == 8
    assert all(a == pytest.approx(right if r == 1.0 else wrong, abs=1e-5) for r, a in segments)


def test_under_gigpo_every_turn_of_every_segment_is_a_row(
    tmp_path, calculator_server, monkeypatch, tokenizer
):
    monkeypatch.setenv("CALCULATOR_MCP_URL", calculator_server.url)
    config = {"backend": "areal", "rollout": {"tool_block": "never", "max_new_tokens": 64}}
    run = trainer_for(tmp_path, {**config, "algorithm": {"advantage": "gigpo"}}).render()
    workflow = rewriting_workflow(run, "summarises")
    engine = ScriptEngine(tokenizer, [replies("summarises", outcome) for outcome in OUTCOMES])
    batch = asyncio.run(workflow.arun_episode(engine, rows(run)[0]))
    check_layout(batch)
    # the right answers' five calls over three segments, the wrong ones' two: a row each
    assert batch["input_ids"].shape[0] == 2 * 5 + 2 * 2
    for i in range(batch["input_ids"].shape[0]):
        n = int(batch["attention_mask"][i].sum())
        ids, mask = batch["input_ids"][i][:n].tolist(), batch["loss_mask"][i][:n].tolist()
        loss = [t for t, m in zip(ids, mask, strict=True) if m]
        assert any(loss == out for calls in engine.calls.values() for _, out, _, _ in calls)


def test_a_failed_summary_call_fails_its_episode_which_gives_no_row(areal_run, tokenizer, tmp_path):
    def lost():
        raise RuntimeError("the policy server is gone")

    failing = replies("summarises", "right")
    failing[2] = lost  # the summary call
    scripts = [failing] + [replies("summarises", outcome) for outcome in OUTCOMES[1:]]
    workflow = rewriting_workflow(areal_run, "summarises", episodes_file=str(tmp_path / "episodes.jsonl"))
    batch = asyncio.run(workflow.arun_episode(ScriptEngine(tokenizer, scripts), rows(areal_run)[0]))
    # the failed episode has no row and no place in the baseline: the others' advantages are the
    # group's without it (one right episode in three segments, two wrong in one)
    right, wrong, _ = group_advantages([1.0, 0.0, 0.0], [0] * 3)
    assert sorted(batch["rewards"].tolist()) == pytest.approx(sorted([right] * 3 + [wrong] * 2), abs=1e-5)
    episodes = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert sorted(e["status"] for e in episodes) == ["error", "ok", "ok", "ok"]
    assert sorted(e["segments"] for e in episodes) == [0, 1, 1, 3]
