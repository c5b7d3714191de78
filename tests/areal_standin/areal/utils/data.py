"""Stand-in for `areal.utils.data.concat_padded_tensors`, for the [B, L] tensor dicts of text rows:
right-pad dimension 1 to the longest with zeros, then concatenate along dimension 0."""

from __future__ import annotations

from typing import Any

import torch


def concat_padded_tensors(tensor_dicts: list[dict[str, Any]], pad_value: float = 0.0) -> dict[str, Any]:
    if not tensor_dicts:
        return {}
    length = max(d["input_ids"].shape[1] for d in tensor_dicts)
    out = {}
    for key in tensor_dicts[0]:
        parts = [d[key] for d in tensor_dicts]
        if parts[0].ndim == 2:
            parts = [torch.nn.functional.pad(p, (0, length - p.shape[1]), value=pad_value) for p in parts]
        out[key] = torch.cat(parts)
    return out
