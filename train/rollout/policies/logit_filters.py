"""Top-k and top-p (nucleus) filtering of a sampler's logits."""

from __future__ import annotations

import torch


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """`logits` with the tokens outside the top `top_k` (0: all) and the top-`top_p` mass set to -inf."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        drop = cumulative - sorted_logits.softmax(-1) > top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    return logits
