"""The logprob mismatch in AReaL's actor (engines/areal/actor.py), on rows laid out as our workflow
gives them and shifted by AReaL 1.0.4's own advantage computation, recorded in AReaL's own stats
tracker: it counts the tokens the current weights sampled, compares each with the logprob the
rollout reported for it, and the step's line warns, naming the cause, above the tolerance."""

from __future__ import annotations

import pytest
import torch
from areal.api.cli_args import PPOActorConfig
from areal.trainer.ppo.actor import PPOActor
from areal.utils import stats_tracker

from aworld_train.engines.areal.actor import SCOPE, record_mismatch, step_metrics, step_report
from aworld_train.inputs.config import AlgorithmConfig

TOLERANCE = AlgorithmConfig().mismatch_tolerance
NOT_SAMPLED = -1


def rows() -> dict[str, torch.Tensor]:
    """Two rows, padded: a prompt, then sampled tokens of versions 0 and 1 with a tool reply (not
    sampled) between them; the logprob the rollout reported at each sampled token."""
    versions = torch.tensor(
        [
            [NOT_SAMPLED, NOT_SAMPLED, 0, 0, NOT_SAMPLED, 1, 1, NOT_SAMPLED],
            [NOT_SAMPLED, NOT_SAMPLED, NOT_SAMPLED, 1, 1, 1, NOT_SAMPLED, NOT_SAMPLED],
        ]
    )
    sampled = versions != NOT_SAMPLED
    attention = torch.tensor([[1] * 8, [1] * 6 + [0] * 2], dtype=torch.bool)
    reported = torch.where(sampled, -torch.arange(1, 17, dtype=torch.float32).view(2, 8) / 10, 0.0)
    return {
        "input_ids": torch.arange(16).view(2, 8),
        "attention_mask": attention,
        "loss_mask": sampled.int(),
        "logprobs": reported,
        "versions": versions,
        "rewards": torch.tensor([1.0, -1.0]),
    }


def as_the_loss_sees_them() -> dict[str, torch.Tensor]:
    config = PPOActorConfig(experiment_name="test", trial_name="mismatch", path="unused")
    return PPOActor(config, engine=None)._compute_advantages(rows())


def exported(recomputed: torch.Tensor, data: dict, version: int) -> dict[str, float]:
    with stats_tracker.scope("ppo_actor"), stats_tracker.scope("update"):
        record_mismatch(recomputed, data, version)
    return stats_tracker.export_all()


def test_only_the_current_weights_tokens_count_each_against_its_own_reported_logprob():
    data = as_the_loss_sees_them()
    # AReaL's forward gives position t the logprob of token t + 1, as its shifted `logprobs`; a
    # recomputation 0.5 off on version 1's tokens and 10 off on version 0's
    next_version = torch.roll(data["versions"], -1, dims=-1)
    recomputed = data["logprobs"] + torch.where(next_version == 1, 0.5, 10.0)
    metrics = step_metrics(exported(recomputed, data, version=1))
    assert metrics["logprob_mismatch_tokens"] == 5  # version 1's tokens: 2 in the first row, 3 in the second
    assert metrics["logprob_mismatch_mean"] == pytest.approx(0.5)
    assert metrics["logprob_mismatch_max"] == pytest.approx(0.5)
    assert step_report(metrics, TOLERANCE).startswith("logprob mismatch 0.5000 (max 0.5000) over 5 tokens")
    metrics = step_metrics(exported(recomputed, data, version=0))
    assert metrics["logprob_mismatch_tokens"] == 2 and metrics["logprob_mismatch_mean"] == pytest.approx(10.0)


def test_a_step_within_the_tolerance_prints_its_figure_and_one_beyond_it_warns():
    data = as_the_loss_sees_them()
    same = step_metrics(exported(data["logprobs"], data, version=1))
    assert same["logprob_mismatch_mean"] == 0 and same["logprob_mismatch_tokens"] == 5
    assert "WARNING" not in step_report(same, TOLERANCE)
    off = step_metrics(exported(data["logprobs"] - 0.3, data, version=1))
    line = step_report(off, TOLERANCE)
    assert line.startswith("logprob mismatch 0.3000")
    assert (
        "WARNING" in line and "LoRA adapter" in line and f"algorithm.mismatch_tolerance={TOLERANCE}" in line
    )


def test_a_step_with_no_token_of_the_current_weights_says_so():
    """Off-policy: a step may train only tokens older weights sampled; the figure is then absent, not 0."""
    data = as_the_loss_sees_them()
    stats = exported(data["logprobs"] - 0.3, data, version=2)
    assert stats[SCOPE + "logprob_mismatch_tokens"] == 0
    metrics = step_metrics(stats)
    assert "none of this update's first mini-batch was sampled by the current weights" in step_report(
        metrics, TOLERANCE
    )
    assert "WARNING" not in step_report(metrics, TOLERANCE)
    assert step_metrics({"ppo_actor/update/actor_loss/avg": 0.1}) is None  # the actor measured nothing
