"""The logprob mismatch: every engine's proof, per step, that its rollout sampled from the weights
being trained (with LoRA: that the adapter reached the rollout's model).

For the tokens the current weights sampled, the logprob the rollout reported against the trainer's
recomputation with the same weights, before its update: mean absolute difference per token. Tokens
older weights sampled (an asynchronous or off-policy run's) differ by design and are left out.
Float32 gives under 1e-4, bf16 rounding a few hundredths; far above that, the rollout sampled from
other weights. The local learner and AReaL's actor (`engines/areal/actor.py`) measure it here; the
step line shows it, and warns above `algorithm.mismatch_tolerance`.
"""

from __future__ import annotations

import math
from typing import Any

import torch

MEAN, MAX, TOKENS = "logprob_mismatch_mean", "logprob_mismatch_max", "logprob_mismatch_tokens"


def token_mismatch(recomputed: torch.Tensor, rollout: torch.Tensor, fresh: torch.Tensor) -> torch.Tensor:
    """|recomputed - rollout| per token where `fresh` (1: a token the recomputing weights sampled),
    0 elsewhere; float32 whatever the inputs' dtype."""
    return (recomputed.detach().float() - rollout.float()).abs() * fresh


def mismatch_metrics(mean: float, largest: float, tokens: int) -> dict[str, float]:
    """A step's figures under the names every engine logs them with (0 tokens: nothing measured)."""
    return {MEAN: float(mean), MAX: float(largest), TOKENS: float(tokens)}


def mismatch_text(metrics: dict[str, Any]) -> str:
    """The step line's part: the mismatch where the step measured one, else nothing."""
    return f" | logprob mismatch {metrics[MEAN]:.4f}" if metrics.get(TOKENS) else ""


def mismatch_warning(metrics: dict[str, Any], tolerance: float | None) -> str | None:
    """The warning for a step's logprob figures, where it measured one (see rollout_mismatch_warning)."""
    return rollout_mismatch_warning(metrics.get(MEAN), tolerance) if metrics.get(TOKENS) else None


def with_warning(line: str, warning: str | None) -> str:
    """A step's line, with its warning (where there is one) after it, as every engine prints it."""
    return f"{line} | WARNING: {warning}" if warning else line


def rollout_mismatch_warning(
    value: float | None, tolerance: float | None, measured: str = "logprobs"
) -> str | None:
    """Why a step's rollout figures (`measured`, mean absolute difference per token: `value`)
    disagree with the trainer's recomputation, where they do by more than `tolerance`: the tokens
    were not sampled from the weights being trained. verl's step line gives its probabilities'."""
    if tolerance is None or value is None or math.isnan(value) or value <= tolerance:
        return None
    return (
        f"the rollout's {measured} differ from the trainer's recomputation by {value:.4f} per token "
        f"(above algorithm.mismatch_tolerance={tolerance}): the rollout is not sampling from the weights "
        "being trained; likely cause: the LoRA adapter (or the last update) was not loaded into the "
        "rollout's model"
    )
