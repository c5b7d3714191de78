"""Advantages per turn on verl (`algorithm.advantage: gigpo | discounted`): our estimators in verl's
registry against a hand computation and credit.py, the agent loop's rows against the local learner's
samples, the trainer wrapper that hands the estimators their batch, and the render's keys. The run
end to end is tests/test_verl_cpu_team_e2e.py (gigpo)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytest.importorskip("verl")

import torch  # noqa: E402
from credit_support import two_turn_episode  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402

from aworld_train.engines.verl import advantages  # noqa: E402
from aworld_train.engines.verl.advantages import batch_turns  # noqa: E402
from aworld_train.engines.verl.loop import to_agent_loop_outputs  # noqa: E402
from aworld_train.engines.verl.turn_credit import CREDIT_ENV, TURNS_FIELD, batch_advantages  # noqa: E402
from aworld_train.rollout.episodes.trajectory import Trajectory  # noqa: E402
from aworld_train.rollout.samples.credit import Turn, turn_advantages  # noqa: E402

EPS = 1e-6


def _row(unit: str, rewards, anchors, first: int, turn_of_token: list[int]) -> dict:
    return {
        "unit": unit,
        "agent": "",
        "rewards": rewards,
        "anchors": anchors,
        "first": first,
        "turn_of_token": turn_of_token,
    }


# Two prompt groups (verl's uid) of two samples each, two turns a sample; -1: a token the policy did
# not sample (a tool result). Sample A's turns are two segments (two rows); the others one row.
# u1: A (r 0.5, 0.5; states q, s) and B (0, 0; q, s): both states recur.
# u2: C (0, 1; p, t1) and D (0, 0; p, t2): p recurs, t1 and t2 are seen once.
A = ([0.5, 0.5], ["q", "s"])
B = ([0.0, 0.0], ["q", "s"])
C = ([0.0, 1.0], ["p", "t1"])
D = ([0.0, 0.0], ["p", "t2"])
ROWS = [
    _row("eA/", *A, 0, [0, 0]),
    _row("eA/", *A, 1, [1, 1, 1]),
    _row("eB/", *B, 0, [0, -1, 1]),
    _row("eC/", *C, 0, [0, 0, -1, -1, 1]),
    _row("eD/", *D, 0, [0, -1, 1, 1]),
]
UIDS = ["u1", "u1", "u1", "u2", "u2"]
WIDTH = 5


def _flat(rows) -> list[float]:
    """Nested per-row values in one list (pytest.approx compares flat sequences)."""
    return [float(v) for row in rows for v in row]


def _estimate(name: str, gamma: float) -> torch.Tensor:
    """verl's own compute_advantage, through its registry, on a DataProto of ROWS."""
    mask = torch.zeros(len(ROWS), WIDTH)
    for i, row in enumerate(ROWS):
        mask[i, : len(row["turn_of_token"])] = torch.tensor([float(t >= 0) for t in row["turn_of_token"]])
    data = DataProto.from_dict(
        tensors={"token_level_rewards": torch.zeros(len(ROWS), WIDTH), "response_mask": mask},
        non_tensors={"uid": np.array(UIDS, dtype=object)},
    )
    config = OmegaConf.create({"gamma": gamma, "norm_adv_by_std_in_grpo": True})
    with batch_turns(ROWS):
        out = compute_advantage(data, adv_estimator=name, gamma=gamma, config=config)
    assert torch.equal(out.batch["advantages"], out.batch["returns"])
    return out.batch["advantages"]


def _tokens(per_unit: dict[str, list[float]]) -> list[list[float]]:
    """The per-token advantages ROWS get from per-unit, per-turn ones."""
    return [
        [per_unit[row["unit"]][t] if t >= 0 else 0.0 for t in row["turn_of_token"]]
        + [0.0] * (WIDTH - len(row["turn_of_token"]))
        for row in ROWS
    ]


def _credit(name: str, gamma: float) -> dict[str, list[float]]:
    units = [[Turn(r, a) for r, a in zip(*u, strict=True)] for u in (A, B, C, D)]
    out = turn_advantages(name, units, [("u1", ""), ("u1", ""), ("u2", ""), ("u2", "")], gamma)
    return dict(zip(("eA/", "eB/", "eC/", "eD/"), out, strict=True))


def test_gigpo_in_verls_registry_gives_the_hand_computed_advantages(monkeypatch):
    monkeypatch.setenv(CREDIT_ENV, json.dumps({"step_weight": 1.0}))
    # episode level: returns 1 vs 0 in each group: mean 0.5, unbiased std sqrt(0.5)
    a = 0.5 / (math.sqrt(0.5) + EPS)
    # step level at gamma 1: state q (G_0 1 vs 0) and p (1 vs 0) as the episode; s (G_1 0.5 vs 0):
    # mean 0.25, std sqrt(0.125); t1 and t2 are seen once: 0
    s = 0.25 / (math.sqrt(0.125) + EPS)
    hand = {"eA/": [a + a, a + s], "eB/": [-a - a, -a - s], "eC/": [2 * a, a], "eD/": [-2 * a, -a]}
    got = _estimate("gigpo", 1.0)
    assert _flat(got.tolist()) == pytest.approx(_flat(_tokens(hand)), abs=1e-6)
    assert _flat(got.tolist()) == pytest.approx(_flat(_tokens(_credit("gigpo", 1.0))), abs=1e-6)
    assert got[0, 0] != got[1, 0]  # A's two turns differ


def test_discounted_in_verls_registry_gives_the_hand_computed_advantages(monkeypatch):
    monkeypatch.delenv(CREDIT_ENV, raising=False)
    # gamma 0.5: A's returns-to-go 0.75, 0.5 against G_0s 0.75, 0 (mean 0.375); C's 0.5, 1 against
    # G_0s 0.5, 0 (mean 0.25); each group scaled by its returns undiscounted, 1 and 0 (std sqrt(2) / 2)
    s1 = s2 = math.sqrt(2) / 2 + EPS
    hand = {
        "eA/": [0.375 / s1, 0.125 / s1],
        "eB/": [-0.375 / s1, -0.375 / s1],
        "eC/": [0.25 / s2, 0.75 / s2],
        "eD/": [-0.25 / s2, -0.25 / s2],
    }
    got = _estimate("discounted", 0.5)
    assert _flat(got.tolist()) == pytest.approx(_flat(_tokens(hand)), abs=1e-6)
    assert _flat(got.tolist()) == pytest.approx(_flat(_tokens(_credit("discounted", 0.5))), abs=1e-6)


def test_an_estimator_without_its_batchs_turns_says_so():
    data = DataProto.from_dict(
        tensors={"token_level_rewards": torch.zeros(1, 2), "response_mask": torch.ones(1, 2)},
        non_tensors={"uid": np.array(["u"], dtype=object)},
    )
    with pytest.raises(RuntimeError, match="turns did not reach the estimator"):
        compute_advantage(data, adv_estimator="gigpo", config=OmegaConf.create({}))


def _episode(reward: float, turn_rewards: list[float], ids_from: int) -> Trajectory:
    return two_turn_episode(reward, turn_rewards, ids_from, tool="tool: call_abc123 5")


def test_the_agent_loops_rows_give_the_local_learners_advantages(monkeypatch):
    """Episodes through to_agent_loop_outputs, then our estimator: each token's advantage is the one
    the local learner's build_samples gives for the same episodes and groups."""
    from aworld_train.engines.local.samples import build_samples
    from aworld_train.rollout.samples.credit import Credit

    trajs = [
        _episode(1.0, [0.0, 0.0], 10),
        _episode(0.0, [-0.5, 0.0], 20),
        _episode(0.0, [0.0], 30),
        _episode(1.0, [0.2, 0.0], 40),
        _episode(0.5, [], 50),
    ]
    groups = ["u1", "u1", "u1", "u2", "u2"]
    rows, uids = [], []
    for traj, group in zip(trajs, groups, strict=True):
        for out in to_agent_loop_outputs(traj, response_length=6, train_on_malformed=False):
            rows.append(out.extra_fields[TURNS_FIELD])
            uids.append(group)
    assert [r["turn_of_token"] for r in rows[:1]] == [[0, 0, 0, -1, -1, 1]]  # cut at response_length
    for estimator in ("gigpo", "discounted"):
        got, record = batch_advantages(estimator, rows, uids, 7, gamma=0.9, step_weight=0.5, norm_by_std=True)
        samples, _ = build_samples(trajs, groups, Credit(estimator, gamma=0.9, step_weight=0.5))
        for row, sample in zip(got, samples, strict=True):
            assert row[:6] == pytest.approx(sample.token_advantages[:6]) and row[6] == 0.0
        assert _flat(u["advantages"] for u in record) == pytest.approx(
            _flat(s.turn_advantages for s in samples)
        )


class _Trainer:
    config = OmegaConf.create({"algorithm": {"adv_estimator": "gigpo"}})
    global_steps = 3


def test_the_trainer_wrapper_reads_the_rows_turns_from_transferqueue(monkeypatch):
    import transfer_queue as tq
    from tensordict import NonTensorData, NonTensorStack
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    assert PPOTrainer._compute_advantage.aworld_turns  # patched on import
    stack = NonTensorStack(NonTensorData({TURNS_FIELD: ROWS[0], "x": 1}), NonTensorData({"x": 2}))
    monkeypatch.setattr(tq, "kv_batch_get", lambda **kwargs: {"extra_fields": stack})
    seen = []

    def original(self, batch, metrics):
        seen.append((advantages._ROWS.get(), advantages._STEP.get()))
        return batch

    batch = type("Batch", (), {"keys": ["k0", "k1"], "partition_id": "train"})()
    assert advantages._with_turns(original)(_Trainer(), batch, {}) is batch
    assert seen == [([ROWS[0], None], 3)]
    _Trainer.config.algorithm.adv_estimator = "grpo"  # verl's own: nothing read
    advantages._with_turns(original)(_Trainer(), batch, {})
    assert seen[-1] == (None, None)


def test_the_render_maps_the_facades_keys_and_registers_the_estimators(tmp_path):
    from backend_support import trainer_for

    from aworld_train.core.errors import ConfigError

    config = {
        "backend": "verl",
        "model": "embedded:smollm2-135m",
        "algorithm": {"advantage": "gigpo", "gamma": 0.9, "step_advantage_weight": 0.5},
    }
    run = trainer_for(tmp_path / "a", config).render()
    assert (run.final.algorithm.adv_estimator, run.final.algorithm.gamma) == ("gigpo", 0.9)
    assert "EpisodeStatusSampler" in run.final.trainer.v1.sampler.custom_sampler.name  # registers them
    settings = json.loads(run.env[CREDIT_ENV])
    assert settings["step_weight"] == 0.5 and settings["log"].endswith("turn_advantages.jsonl")
    plain = trainer_for(tmp_path / "b", {**config, "algorithm": {}}).render()
    assert plain.final.algorithm.adv_estimator == "grpo" and CREDIT_ENV not in plain.env
    with pytest.raises(ConfigError, match="adv_estimator"):
        native = {"algorithm": {"adv_estimator": "rloo"}}
        trainer_for(tmp_path / "c", {**config, "verl": native}).render()
    with pytest.raises(ConfigError, match="set that instead"):
        native = {"algorithm": {"adv_estimator": "gigpo"}}
        trainer_for(tmp_path / "d", {**config, "algorithm": {}, "verl": native}).render()
