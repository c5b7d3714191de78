"""A seed per AReaL request: the held-out evaluation draws each sample from its own seed on AReaL as on
the local backend (`derive_seed(eval seed, task id, sample)`, then per LLM call), so that
`aworld-train eval` on the run's checkpoint reproduces the run's figure.

AReaL 1.0.4's `GenerationHyperparameters` has no seed and its request builders send none. The
workflow's policy puts a call's seed in `ModelRequest.metadata` (which AReaL copies with the request,
also when it resends one its pause aborted), and the builders are wrapped to send it: SGLang's
`sampling_params.sampling_seed` (which our CPU policy server reads, cpu/server.py), vLLM's `seed`.
Declared in aworld_train.core.patch_table (AREAL_PATCHES); `carry_sampling_seeds` refuses an AReaL
whose builders changed.
"""

from __future__ import annotations

import functools
from typing import Any

SEED_KEY = "sampling_seed"  # in ModelRequest.metadata, and SGLang's name in sampling_params


def with_seed(payload: dict[str, Any], seed: int, backend: str) -> dict[str, Any]:
    """`payload` (a request AReaL built for `backend`) asking its server to sample from `seed`."""
    if backend == "vllm":  # vLLM's flat completions request
        return {**payload, "seed": seed}
    return {**payload, "sampling_params": {**payload["sampling_params"], SEED_KEY: seed}}


def _seeded(build, backend: str):
    @functools.wraps(build)
    def build_generation_request(self, req, with_lora: bool, version: int):
        request = build(self, req, with_lora, version)
        seed = req.metadata.get(SEED_KEY)
        if seed is not None:
            request.payload = with_seed(request.payload, int(seed), backend)
        return request

    build_generation_request.aworld_seeds = True  # type: ignore[attr-defined]
    return build_generation_request


def carry_sampling_seeds() -> None:
    """Wrap SGLang's and vLLM's request builders of AReaL, once per process."""
    from areal.engine.sglang_remote import SGLangBackend
    from areal.engine.vllm_remote import VLLMBackend

    from aworld_train.core.patch_table import AREAL_PATCHES
    from aworld_train.core.upstream import guard

    if getattr(SGLangBackend.build_generation_request, "aworld_seeds", False):
        return
    guard(AREAL_PATCHES, "areal", "aworld-train's seeded held-out evaluation")
    SGLangBackend.build_generation_request = _seeded(SGLangBackend.build_generation_request, "sglang")
    VLLMBackend.build_generation_request = _seeded(VLLMBackend.build_generation_request, "vllm")
