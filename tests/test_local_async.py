"""backend: local, asynchronous (algorithm.max_staleness): admission, stale groups dropped and
counted, the decoupled loss, and short runs on the tiny random model."""

import asyncio
import json
import math
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from aworld_train import AgentTrainer
from aworld_train.core.errors import RunCannotLearn
from aworld_train.engines.local.async_rollout import GroupStream, admission_limit
from aworld_train.engines.local.grpo import policy_loss
from aworld_train.engines.local.learner import GRPOLearner
from aworld_train.engines.local.samples import Sample
from aworld_train.inputs.config import AlgorithmConfig, TrainConfig

ROWS = [{"prompt": f"What is {i} + 1?", "ground_truth": i + 1} for i in range(6)]


def config(tmp_path, model_dir, steps, **algorithm):
    return {
        "model": str(model_dir),
        "agent": "aworld_train.agents.calculator:build_agent",
        "algorithm": {"group_size": 2, "lr": 1e-3, **algorithm},
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
            "save_every": 0,
            "eval_every": 0,
            "eval_before": False,
            "eval_after": False,
            "run_dir": str(tmp_path / "run"),
            "log_trajectories": 8,
        },
        "env": [{"name": "calculator"}],
    }


def train_rows(run) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["phase"] == "train"]


def episodes(run, step: int) -> list[dict]:
    path = run / f"trajectories/step_{step:06d}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- config ---------------------------------------------------------------------------------------
def test_the_switch_is_one_spelling_on_every_engine_and_runs_in_one_process_locally():
    # verl and AReaL take it in their own keys (tests/test_facade_keys.py)
    assert TrainConfig(backend="verl", algorithm={"max_staleness": 1}).algorithm.max_staleness == 1
    assert TrainConfig(backend="areal", algorithm={"importance_cap": 3.0}).algorithm.importance_cap == 3.0
    with pytest.raises(ValueError, match=r"set rollout.workers: 1"):
        TrainConfig(algorithm={"max_staleness": 2}, rollout={"workers": 2})
    with pytest.raises(ValueError, match=r"max_staleness"):
        TrainConfig(algorithm={"max_staleness": -1})
    assert TrainConfig().algorithm.max_staleness == 0  # synchronous unless asked


# -- admission and dropping, without a model --------------------------------------------------------
def fake_group(trajectories_version):
    """A group's trajectories, every token sampled by one version."""
    return [SimpleNamespace(min_version=trajectories_version)]


def test_admission_runs_at_most_max_staleness_steps_ahead_and_moves_with_the_version():
    assert admission_limit(0, 0, 4) == 4 and admission_limit(2, 3, 4) == 24
    state = {"version": 0}
    admitted: list[int] = []
    release = threading.Event()

    async def run_group(index, limit):
        admitted.append(index)
        while not release.is_set():
            await asyncio.sleep(0.005)
        return fake_group(state["version"])

    stream = GroupStream(
        run_group, lambda: state["version"], batch=2, max_staleness=1, concurrency=64, group_size=2
    )
    stream.start()
    try:
        time.sleep(0.3)
        assert admitted == [0, 1, 2, 3]  # (1 + 0 + 1) x 2: two steps' groups, no more
        state["version"] = 1
        stream.weights_changed()
        time.sleep(0.3)
        assert admitted == [0, 1, 2, 3, 4, 5]
        release.set()
        taken = stream.take()
        assert [g.index for g in taken.groups] == sorted(g.index for g in taken.groups)
        assert len(taken.groups) == 2 and not taken.dropped
    finally:
        stream.close()


def test_stale_groups_are_dropped_counted_and_replaced():
    state = {"version": 0}

    # group 0 was sampled by version 0, the rest by version 3
    async def run_group(index, limit):
        await asyncio.sleep(0.01 * index)  # finish in stream order
        return fake_group(0 if index == 0 else 3)

    stream = GroupStream(
        run_group, lambda: state["version"], batch=2, max_staleness=1, concurrency=64, group_size=2
    )
    state["version"] = 3  # the weights moved on: version-0 groups are 3 behind
    stream.start()
    try:
        taken = stream.take()
        assert [g.index for g in taken.dropped] == [0]
        assert [g.index for g in taken.groups] == [1, 2]  # group 2 took the dropped one's place
        time.sleep(0.1)
        assert stream.dropped == 1  # the bound does not count it: its place is admitted again
    finally:
        stream.close()


# -- the decoupled loss ---------------------------------------------------------------------------------
def test_the_loss_weighs_old_tokens_by_the_truncated_importance_ratio():
    logprobs = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    proximal = torch.tensor([[-1.0, -2.0, -0.5]])
    adv = torch.tensor([[1.0]])
    mask = torch.ones(1, 3)
    plain, _ = policy_loss(logprobs, proximal, adv, mask)
    same, _ = policy_loss(logprobs, proximal, adv, mask, behaviour_logprobs=proximal.clone())
    assert same.item() == plain.item()  # tokens of the current weights: weight exactly 1
    behaviour = torch.tensor([[-1.0, -1.0, -3.0]])  # pi_prox / pi_b: 1, e^-1, e^2.5 (capped at 2)
    decoupled, _ = policy_loss(
        logprobs, proximal, adv, mask, behaviour_logprobs=behaviour, importance_cap=2.0
    )
    assert decoupled.item() == pytest.approx(-(1.0 + math.exp(-1.0) + 2.0) / 3)


def test_a_partial_rollouts_old_tokens_get_a_ratio_other_than_one_after_an_update(tiny_model_dir, tokenizer):
    from aworld_train.rollout.policies.models import load_model

    model = load_model(str(tiny_model_dir))
    learner = GRPOLearner(model, AlgorithmConfig(lr=5e-2), 1.0, tokenizer.pad_token_id)
    prompt = tokenizer.encode("What is 2 + 1?")
    response = tokenizer.encode(" The answer is 3")
    n = len(response)

    def sample(advantage: float) -> Sample:
        batch = {"ids": torch.tensor([prompt + response]), "attention": torch.ones(1, len(prompt) + n)}
        batch["mask"] = torch.zeros(1, len(prompt) + n - 1)
        batch["mask"][0, len(prompt) - 1 :] = 1
        with torch.no_grad():
            recorded = learner._logprobs(model, batch)[0, len(prompt) - 1 :].tolist()
        # its first half sampled by version 0, the rest by version 1 (the weights changed mid-episode)
        versions = [0] * (n // 2) + [1] * (n - n // 2)
        return Sample(prompt + response, len(prompt), [1] * n, recorded, advantage, versions=versions)

    old = sample(1.0)  # recorded under version 0's weights
    learner.step([sample(1.0), sample(-1.0)], version=0)  # one update: the weights are version 1 now
    weights = learner.set_proximal([old], version=1)
    ratios = [math.exp(p - b) for p, b in zip(old.proximal_logprobs, old.old_logprobs, strict=True)]
    assert all(abs(r - 1.0) > 1e-4 for r in ratios[: n // 2])  # version 0's tokens: moved
    assert ratios[n // 2 :] == [1.0] * (n - n // 2)  # version 1's own tokens: the recorded logprobs
    assert weights == pytest.approx(ratios[: n // 2])  # one importance weight per stale token


def test_the_first_mini_batch_takes_its_proximal_policy_from_its_own_forward(tiny_model_dir, tokenizer):
    """With one mini-batch the proximal policy is the weights the loss's forward runs on: the update
    takes one forward per micro-batch, not a second for the stale tokens, and gives the loss and the
    importance weights of the update that recomputes them first (as later mini-batches do)."""
    from aworld_train.rollout.policies.models import load_model

    prompt = tokenizer.encode("What is 2 + 1?")
    response = tokenizer.encode(" The answer is 3")
    n = len(response)

    def stale_samples(learner) -> list[Sample]:
        ids = torch.tensor([prompt + response])
        batch = {"ids": ids, "attention": torch.ones_like(ids), "mask": torch.zeros(1, ids.shape[1] - 1)}
        batch["mask"][0, len(prompt) - 1 :] = 1
        with torch.no_grad():
            now = learner._logprobs(learner.model, batch)[0, len(prompt) - 1 :].tolist()
        # sampled by older weights (version 0), which found each token a little less likely
        behaviour = [lp - 0.05 * (1 + i % 3) for i, lp in enumerate(now)]
        return [
            Sample(prompt + response, len(prompt), [1] * n, behaviour, a, versions=[0] * n)
            for a in (1.0, -1.0)
        ]

    def learner():
        model = load_model(str(tiny_model_dir), dtype=torch.float32)
        return GRPOLearner(model, AlgorithmConfig(lr=1e-3, importance_cap=1.08), 1.0, tokenizer.pad_token_id)

    fused, recomputed = learner(), learner()
    samples, forwards = stale_samples(fused), []
    fused.model.get_decoder().register_forward_hook(lambda *_: forwards.append(1))
    metrics = fused.step(samples, version=1)
    assert len(forwards) == metrics["micro_batches"] == 1
    samples = stale_samples(recomputed)
    weights = recomputed.set_proximal(samples, version=1)  # the later mini-batches' path
    reference = recomputed._step(samples, None)
    assert metrics["loss"] == pytest.approx(reference["loss"], abs=1e-6)
    assert metrics["stale_tokens"] == 2 * n and len(weights) == 2 * n
    assert metrics["importance_weight_mean"] == pytest.approx(
        sum(min(w, 1.08) for w in weights) / len(weights)
    )
    assert 0 < metrics["importance_truncated_frac"] < 1  # e^0.05 and e^0.1 pass the cap, e^0.15 does not


# -- runs on the tiny model --------------------------------------------------------------------------
def test_max_staleness_zero_through_the_stream_is_the_synchronous_run(tmp_path, tiny_model_dir, monkeypatch):
    """The background stream at max_staleness 0 samples the synchronous run's groups with the same
    weights and trains the same samples to the same losses."""
    from aworld_train.engines.local.training import LocalTraining

    AgentTrainer(config=config(tmp_path / "sync", tiny_model_dir, 2), train_dataset=ROWS).train()
    monkeypatch.setattr(LocalTraining, "asynchronous", True)
    AgentTrainer(config=config(tmp_path / "stream", tiny_model_dir, 2), train_dataset=ROWS).train()
    sync, stream = tmp_path / "sync/run", tmp_path / "stream/run"
    keys = ("loss", "pg_loss", "reward_mean", "train_tokens", "samples", "logprob_mismatch_mean")
    assert [{k: r[k] for k in keys} for r in train_rows(stream)] == [
        {k: r[k] for k in keys} for r in train_rows(sync)
    ]
    assert [r["dropped_stale"] for r in train_rows(stream)] == [0, 0]
    for step in (1, 2):
        a, b = episodes(sync, step), episodes(stream, step)
        assert [(e["task_id"], e["messages"]) for e in b] == [(e["task_id"], e["messages"]) for e in a]
        assert {(e["min_version"], e["max_version"]) for e in b} == {(step - 1, step - 1)}


def test_an_asynchronous_run_trains_on_groups_up_to_max_staleness_behind(tmp_path, tiny_model_dir, capsys):
    cfg = config(tmp_path, tiny_model_dir, 3, max_staleness=1)
    summary = AgentTrainer(config=cfg, train_dataset=ROWS).train()
    assert summary["final_checkpoint"]
    rows = train_rows(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(0 <= r["staleness_max"] <= 1 and r["dropped_stale"] >= 0 for r in rows)
    assert "dropped stale" in capsys.readouterr().err  # the step line shows it
    for step in (1, 2, 3):  # every trained episode is within the bound of the weights it trained
        assert all(
            step - 1 - e["min_version"] <= 1
            for e in episodes(tmp_path / "run", step)
            if e["min_version"] is not None
        )


def test_a_run_whose_every_group_goes_stale_stops_with_the_cause(tmp_path, tiny_model_dir, monkeypatch):
    """The weights' version jumps past the bound after every LLM call: no group is ever fresh."""
    from aworld_train.rollout.policies.local import LocalPolicy

    generate = LocalPolicy._generate

    def jumping(self, *args, **kwargs):
        out = generate(self, *args, **kwargs)
        self.version += 5
        return out

    monkeypatch.setattr(LocalPolicy, "_generate", jumping)
    cfg = config(tmp_path, tiny_model_dir, 6, max_staleness=1)
    cfg["trainer"]["stop_after_failed_steps"] = 2
    with pytest.raises(
        RunCannotLearn,
        match=r"every group of the last 2 steps ended as 'stale'.*raise algorithm.max_staleness",
    ):
        AgentTrainer(config=cfg, train_dataset=ROWS).train()
    rows = train_rows(tmp_path / "run")
    assert [r["dropped_stale"] for r in rows] == [2, 2]
    assert all(r["skipped"] == 1.0 for r in rows)  # nothing trained: the weights stayed
