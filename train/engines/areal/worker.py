"""AReaL's worker process, with the run's model class registered so that packed micro-batches
are masked sequence by sequence.

    python -m aworld_train.engines.areal.worker [AReaL's rpc_server arguments]

AReaL 1.0.4's FSDP engine packs a micro-batch's sequences into one row (`cu_seq_lens`, restarting
`position_ids`) and, for every model but Qwen3-MoE/VL/3.5, passes `attention_mask=
{"full_attention": None, "sliding_attention": None}` (`fsdp_engine.py`, `_prepare_mb_inputs`),
which only flash-attention's varlen kernels read correctly. Under sdpa or eager attention (the
render's choice: areal[sglang] installs no flash-attn, and a CPU has none) that mapping means one
causal mask over the whole row, so every sequence attends to those packed before it (0.37 of
logit error on a tiny Qwen2: tests/areal_env/test_areal_worker.py); the forward of a model that takes
no mapping (Llama, Mistral, Phi-3: `create_causal_mask` reads `attention_mask.ndim`) fails.
Given `attention_mask=None`, transformers finds the packed sequences from the restarting
`position_ids` and masks each one on its own, with any attention implementation.

The class registered for the model's config (`AutoModelForCausalLM.register`, which AReaL's
`from_pretrained` then builds) makes that one replacement; it keeps its parent's name, so the
checkpoints AReaL saves name the model's own architecture.
"""

from __future__ import annotations

import functools
import os
import runpy
import sys

MODEL_VARIABLE = "AWORLD_TRAIN_AREAL_MODEL"
RPC_SERVER = "areal.infra.rpc.rpc_server"
COMMAND = f"python -m {__name__}"


def scheduling_spec(gpu: int, model_path: str, **resources: int) -> dict:
    """An AReaL scheduling spec that runs this worker for the model (a spec written in YAML
    replaces AReaL's default one, so it needs its `cmd`)."""
    return {"gpu": gpu, **resources, "cmd": COMMAND, "env_vars": {MODEL_VARIABLE: model_path}}


def unpacked_mask(attention_mask):
    """None for AReaL's mapping of Nones (per-sequence masking from position_ids), else as given."""
    if isinstance(attention_mask, dict) and all(value is None for value in attention_mask.values()):
        return None
    return attention_mask


def packing_safe_class(base: type) -> type:
    @functools.wraps(base.forward)  # the signature stays the parent's (callers inspect it)
    def forward(self, *args, attention_mask=None, **kwargs):
        return base.forward(self, *args, attention_mask=unpacked_mask(attention_mask), **kwargs)

    return type(base.__name__, (base,), {"forward": forward, "__module__": base.__module__})


def register_model(path: str) -> type | None:
    """Register the packing-safe class for the model at `path`; the class, or None for a model
    with its own code (trust_remote_code), which the registry does not reach."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path)
    mapping = AutoModelForCausalLM._model_mapping
    if type(config) not in mapping:
        return None
    safe = packing_safe_class(mapping[type(config)])
    AutoModelForCausalLM.register(type(config), safe, exist_ok=True)
    return safe


def main() -> None:
    model = os.environ.get(MODEL_VARIABLE)
    if model:
        register_model(model)
    sys.argv[0] = RPC_SERVER
    runpy.run_module(RPC_SERVER, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
