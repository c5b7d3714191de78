"""The per-step proof that the rollout samples from the weights being trained: the rollout's
per-token figures for the tokens it sampled against the trainer's recomputation of them, and the
warning every engine gives where they differ by more than `algorithm.mismatch_tolerance`."""

from __future__ import annotations

import math


def rollout_mismatch_warning(
    value: float | None, tolerance: float | None, measured: str = "logprobs"
) -> str | None:
    """Why a step's rollout figures (`measured`, mean absolute difference per token: `value`)
    disagree with the trainer's, where they do by more than `tolerance`; else None."""
    if tolerance is None or value is None or math.isnan(value) or value <= tolerance:
        return None
    return (
        f"the rollout's {measured} differ from the trainer's recomputation by {value:.4f} per token "
        f"(above algorithm.mismatch_tolerance={tolerance}): the rollout is not sampling from the weights "
        "being trained; likely cause: the LoRA adapter (or the last update) was not loaded into the "
        "rollout's model"
    )
