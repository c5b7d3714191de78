"""What an AReaL run on a CPU needs beyond a GPU run: the same render and the same entry point
(`engines/areal/main.py`), with workers that ask for no GPU, float32 weights handed over through
disk, and our policy server in SGLang's place (`engines/areal/cpu/`).

`areal.cluster.n_gpus_per_node: 0` (a node without GPUs, in AReaL's own terms) is the one switch.
AReaL itself falls back to its CpuPlatform (gloo) when no CUDA device exists.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from aworld_train.core.errors import ConfigError
from aworld_train.engines.areal.worker import scheduling_spec
from aworld_train.engines.native import BLANK, Derived, get

if TYPE_CHECKING:
    from aworld_train.inputs.config import TrainConfig


def is_cpu_run(cfg: TrainConfig) -> bool:
    value = get(cfg.areal, "cluster.n_gpus_per_node") if cfg.backend == "areal" else None
    return value not in BLANK and int(value) == 0


def refuse_cpu_lora(cfg: TrainConfig) -> None:
    """Our CPU policy server loads full weights, not AReaL's LoRA adapters: refused before the run
    starts, not by the server after AReaL's first update."""
    if is_cpu_run(cfg) and get(cfg.areal, "actor.use_lora") is True:
        raise ConfigError(
            "areal.actor.use_lora: true with areal.cluster.n_gpus_per_node: 0: the CPU policy server loads "
            "full weights only, not a LoRA adapter; remove actor.use_lora (train every weight on CPU), or "
            "run AReaL on GPUs, or use backend local with algorithm.lora"
        )


def cpu_values(model_path: str) -> list[Derived]:
    """Values a CPU run derives before the common ones (which would ask for a GPU per worker)."""
    cores = max(1, min(8, os.cpu_count() or 1))
    return [
        # a worker's `cpu` becomes its OMP/MKL thread count (AReaL's get_thread_env_vars)
        Derived("actor.scheduling_spec", [scheduling_spec(0, model_path, cpu=cores, mem=4)]),
        Derived("rollout.scheduling_spec", [scheduling_spec(0, model_path, cpu=1, mem=4)]),
        # the policy server samples in float32: the actor recomputes the same logprobs
        Derived("actor.dtype", "float32"),
        # the server loads what the actor saves after each update (no NCCL on a CPU)
        Derived("actor.weight_update_mode", "disk"),
    ]


def server_settings(model_path: str) -> dict[str, Any]:
    """What the entry point starts our policy server with (workflow.yaml's `cpu_server`)."""
    return {"model": model_path}
