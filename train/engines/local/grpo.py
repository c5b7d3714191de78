"""GRPO math: the clipped token-level policy loss (decoupled for tokens of older weights), k3 KL
(group advantages: `rollout.codec`).

Pure tensor functions, tested against hand-computed values and (where verl is
installed) against verl's own implementations on the same tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch.utils.checkpoint import checkpoint

LossAgg = Literal["token-mean", "seq-mean-token-mean"]


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1)


def aggregate(
    per_token: torch.Tensor, mask: torch.Tensor, mode: LossAgg, row_weights: torch.Tensor | None = None
) -> torch.Tensor:
    """token-mean: mean over all valid tokens; seq-mean-token-mean: mean over sequences of their
    token mean, each sequence weighed by `row_weights` where given (the share of its episode's
    tokens a segment holds, so that an episode counts once however many segments it has)."""
    mask = mask.to(per_token.dtype)
    if mode == "token-mean":
        return masked_mean(per_token, mask)
    if mode == "seq-mean-token-mean":
        per_seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        weights = (mask.sum(-1) > 0).to(per_token.dtype)
        if row_weights is not None:
            weights = weights * row_weights.to(per_token.dtype)
        return (per_seq * weights).sum() / weights.sum().clamp(min=1e-12)
    raise ValueError(f"unknown loss_agg_mode {mode!r}")


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    agg: LossAgg = "token-mean",
    behaviour_logprobs: torch.Tensor | None = None,
    importance_cap: float = 2.0,
    row_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate per token (ratio clipped to [1 - clip_low, 1 + clip_high]).

    All tensors are [batch, tokens]; advantages are broadcast per token. With
    `behaviour_logprobs` (tokens sampled by older weights) this is the decoupled objective:
    the ratio is taken against the proximal policy `old_logprobs` (the weights before this
    update) and each token is weighted by pi_prox / pi_behaviour, truncated at
    `importance_cap`. Where the two agree the weight is exactly 1: the plain loss. `row_weights`:
    as `aggregate`'s.
    """
    log_ratio = (logprobs - old_logprobs).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    if behaviour_logprobs is not None:
        per_token = per_token * behaviour_weights(old_logprobs, behaviour_logprobs, importance_cap)
    loss = aggregate(per_token, mask, agg, row_weights)
    with torch.no_grad():
        m = mask.to(per_token.dtype)
        stats = {
            "clip_frac": float(masked_mean((clipped > unclipped).to(per_token.dtype), m)),
            "approx_kl_old": float(masked_mean(-log_ratio, m)),
        }
    return loss, stats


def behaviour_weights(
    proximal_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, cap: float
) -> torch.Tensor:
    """pi_prox / pi_behaviour per token, truncated at `cap` (no gradient: both are fixed)."""
    log_weight = (proximal_logprobs - behaviour_logprobs).clamp(-20.0, 20.0)
    return torch.exp(log_weight).clamp(max=cap).detach()


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(policy || reference): exp(ref - p) - (ref - p) - 1, clamped like verl."""
    diff = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    return (torch.exp(diff) - diff - 1.0).clamp(-10.0, 10.0)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log_softmax(logits / T) at targets; logits [..., V] aligned with targets [...].

    Computed as logit - logsumexp so no second [B, T, V] tensor is materialised.
    """
    scaled = logits.float() / (temperature if temperature > 0 else 1.0)
    picked = scaled.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(scaled, dim=-1)


def chunked_token_logprobs(
    hidden: torch.Tensor,
    head: Callable[[torch.Tensor], torch.Tensor],
    targets: torch.Tensor,
    temperature: float = 1.0,
    chunk: int = 128,
) -> torch.Tensor:
    """token_logprobs(head(hidden), targets), `chunk` rows at a time; hidden [N, H], targets [N].

    The [N, vocab] logits are the largest tensors of a step (4096 tokens x 49k vocabulary is
    800 MB, several times over with the softmax and its gradient). Here only one chunk's exist
    at a time, and under autograd they are recomputed in backward instead of being kept. A chunk's
    backward holds about six float32 copies of its [chunk, vocab] logits at once: 128 rows keep
    that near 150 MB on a 49k vocabulary (512 rows: 600 MB, the peak of a LoRA step), and
    [128, hidden] x [hidden, vocab] is still a full-speed matrix product.
    """
    outs = []
    for start in range(0, hidden.shape[0], chunk):
        h, t = hidden[start : start + chunk], targets[start : start + chunk]
        if torch.is_grad_enabled() and (h.requires_grad or any(p.requires_grad for p in _params(head))):
            outs.append(checkpoint(_head_logprobs, h, t, head, temperature, use_reentrant=False))
        else:
            outs.append(_head_logprobs(h, t, head, temperature))
    return torch.cat(outs) if outs else hidden.new_zeros(0, dtype=torch.float32)


def _head_logprobs(hidden, targets, head, temperature: float) -> torch.Tensor:
    return token_logprobs(head(hidden), targets, temperature)


def _params(module) -> list[torch.Tensor]:
    return list(module.parameters()) if isinstance(module, torch.nn.Module) else []
