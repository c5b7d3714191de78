"""What an AReaL run on a CPU needs beyond a GPU run: the same render and the same entry point
(`engines/areal/main.py`), with workers that ask for no GPU, float32 weights (or, with
`actor.use_lora`, LoRA adapters) handed over through disk, and our policy server in SGLang's place
(`engines/areal/cpu/`).

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
    """LoRA settings our CPU policy server cannot honour, refused before the run starts (not by the
    server after AReaL's first update). It serves AReaL's adapters as SGLang does: requests name
    `<gconfig.lora_name>-v<version>`, which `rollout.use_lora` makes them do (derived from
    `actor.use_lora`)."""
    if not is_cpu_run(cfg):
        return
    actor = get(cfg.areal, "actor.use_lora") is True or cfg.algorithm.lora is not None
    rollout = get(cfg.areal, "rollout.use_lora")
    if actor and rollout is False:
        raise ConfigError(
            "areal.rollout.use_lora: false with areal.actor.use_lora: true: the rollout would ask the CPU "
            "policy server for the base model while the actor trains an adapter; remove rollout.use_lora "
            "(a CPU run sets it from actor.use_lora)"
        )
    if rollout is True and not actor:
        raise ConfigError(
            "areal.rollout.use_lora: true without areal.actor.use_lora: the rollout would name LoRA adapters "
            "the actor never saves; set actor.use_lora: true, or remove rollout.use_lora"
        )
    if actor and get(cfg.areal, "gconfig.lora_name") == "":
        raise ConfigError(
            "areal.gconfig.lora_name is empty with areal.actor.use_lora: true: AReaL names each adapter it "
            "loads <lora_name>-v<version>; remove it (AReaL's default: default_lora) or name the adapter"
        )


def cpu_values(cfg: TrainConfig, model_path: str) -> list[Derived]:
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
        # the client AReaL builds for the server: vLLM's routes where vLLM samples (cpu/vllm_front.py)
        Derived("rollout.backend", f"{'vllm' if cfg.rollout.engine == 'vllm' else 'sglang'}:d1"),
        # with actor.use_lora, requests name the adapter the server loaded (as SGLang's do)
        Derived("rollout.use_lora", "${actor.use_lora}"),
    ]


# AReaL 1.0.4's default actor.lora_rank (api/cli_args.py)
_AREAL_LORA_RANK = 32


def server_settings(cfg: TrainConfig, model_path: str) -> dict[str, Any]:
    """What the entry point starts our policy server with (workflow.yaml's `cpu_server`); with
    `rollout.engine: vllm`, vLLM's server behind AReaL's vLLM routes (cpu/vllm_front.py)."""
    if cfg.rollout.engine != "vllm":
        return {"model": model_path}
    return {
        "model": model_path,
        "sampler": "vllm",
        "max_len": cfg.rollout.max_total_tokens,
        "seed": cfg.trainer.seed,
        "kv_cache_gib": cfg.rollout.vllm_kv_cache_gib,
        # the actor's adapter served as one of vLLM's own (AReaL's actor.use_lora, the facade's lora)
        "lora_rank": lora_rank(cfg),
    }


def lora_rank(cfg: TrainConfig) -> int | None:
    """The rank of the adapter AReaL's actor trains (None: every weight)."""
    if cfg.algorithm.lora is not None:
        return cfg.algorithm.lora.rank
    if get(cfg.areal, "actor.use_lora") is True:
        return int(get(cfg.areal, "actor.lora_rank") or _AREAL_LORA_RANK)
    return None


def refuse_unrunnable_vllm_sampler(cfg: TrainConfig) -> None:
    """`rollout.engine: vllm` on AReaL: a CPU run's vLLM server behind AReaL's vLLM backend. A GPU run
    samples with the engine AReaL's own config names."""
    if cfg.rollout.engine != "vllm":
        return
    if not is_cpu_run(cfg):
        raise ConfigError(
            "rollout.engine: vllm picks the sampler of a CPU run (areal.cluster.n_gpus_per_node: 0); on a "
            "GPU AReaL samples with the inference engine its allocation_mode names (sglang or vllm): "
            "remove rollout.engine"
        )
