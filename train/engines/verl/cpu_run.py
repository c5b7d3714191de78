"""What a verl run on a CPU needs beyond a GPU run: the same render and the same `main_ppo`,
with the device, the rollout name, a few process counts, and the environment below.

A run is a CPU run when the native section says `trainer.device: cpu` (or names the
`aworld_cpu` rollout); `verl.trainer.device: cpu` in the YAML is the one switch.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from aworld_train.core.errors import ConfigError
from aworld_train.engines.native import BLANK, Derived, get

if TYPE_CHECKING:
    from aworld_train.inputs.config import TrainConfig

PLUGIN = "aworld_train.engines.verl.cpu"
ROLLOUT = "aworld_cpu"
EPISODES_FILE = Path(__file__).with_name("episodes.py")


def _native(cfg: TrainConfig, dotted: str) -> Any:
    value = get(cfg.verl, dotted) if cfg.backend == "verl" else None
    return None if value in BLANK else value


def is_cpu_run(cfg: TrainConfig) -> bool:
    device = _native(cfg, "trainer.device")
    rollout = _native(cfg, "actor_rollout_ref.rollout.name")
    if device == "cpu" and rollout not in (None, ROLLOUT):
        raise ConfigError(
            f"verl.actor_rollout_ref.rollout.name={rollout!r} needs an accelerator, but verl.trainer.device=cpu; "
            f"remove the rollout name (a CPU run uses {ROLLOUT!r}) or the device"
        )
    if rollout == ROLLOUT and device not in (None, "cpu"):
        raise ConfigError(
            f"verl.actor_rollout_ref.rollout.name={ROLLOUT!r} serves from the CPU, but verl.trainer.device="
            f"{device!r}; set verl.trainer.device=cpu or choose a GPU rollout (vllm, sglang)"
        )
    return device == "cpu" or rollout == ROLLOUT


def cpu_derived(cfg: TrainConfig) -> list[Derived]:
    """verl keys a CPU run fills (a value the user gave still wins)."""
    return [
        *(separate_derived() if _native(cfg, "trainer.v1.trainer_mode") == "separate_async" else []),
        Derived("trainer.device", "cpu"),
        Derived("trainer.nnodes", 1),
        Derived("trainer.n_gpus_per_node", 1),
        # Ray counts logical CPUs: verl's TransferQueue alone asks one for its controller and
        # one per storage unit, more than a 2-core machine has; the OS shares the real cores.
        Derived("ray_kwargs.ray_init.num_cpus", 32),
        Derived("transfer_queue.backend.SimpleStorage.num_data_storage_units", 1),
        Derived("actor_rollout_ref.rollout.tensor_model_parallel_size", 1),
        Derived("actor_rollout_ref.rollout.agent.num_workers", 1),
        Derived("reward.num_workers", 1),
        Derived("data.dataloader_num_workers", 0),
        # FSDP1 asks torch for an accelerator when it wraps the model (torch/distributed/fsdp/
        # _init_utils.py); FSDP2 runs on CPU with gloo. torch.compile would compile for minutes.
        *(
            Derived(f"actor_rollout_ref.{role}.{key}", value)
            for role in ("actor", "ref")
            for key, value in (
                ("strategy", "fsdp2"),
                ("fsdp_config.strategy", "fsdp2"),
                ("fsdp_config.use_torch_compile", False),
            )
        ),
    ]


def separate_derived() -> list[Derived]:
    """separate_async on a CPU, the smallest configuration it runs in: one standalone `aworld_cpu`
    replica in a slot of its own beside the actor's, the weights carried to it by the `aworld_cpu`
    checkpoint engine (cpu/weights.py). verl's hybrid replica on the actor's slot stays (verl's
    default; it serves until the first step begins): verl 0.9.1 cannot start without it (modes.py)."""
    return [
        Derived("actor_rollout_ref.rollout.nnodes", 1),
        Derived("actor_rollout_ref.rollout.n_gpus_per_node", 1),
        Derived("actor_rollout_ref.rollout.checkpoint_engine.backend", ROLLOUT),
    ]


def cpu_extras(final: Any, joins_cluster: bool = False) -> None:
    """Keys outside verl's config schema, set on the composed config."""
    from omegaconf import OmegaConf, open_dict

    with open_dict(final):
        slots = int(final.trainer.n_gpus_per_node) * int(final.trainer.nnodes)
        if final.trainer.v1.trainer_mode == "separate_async":  # the standalone rollout's own slots
            slots += int(final.actor_rollout_ref.rollout.n_gpus_per_node) * int(
                final.actor_rollout_ref.rollout.nnodes
            )
        # a cluster's nodes declare their slots themselves (ray start --num-gpus)
        if not joins_cluster and OmegaConf.select(final, "ray_kwargs.ray_init.num_gpus") is None:
            # the cpu platform's worker slot is Ray's logical "GPU" (engines/verl/cpu/platform.py)
            final.ray_kwargs.ray_init.num_gpus = slots
        override = final.actor_rollout_ref.model.override_config
        if override.get("attn_implementation") is None:
            override.attn_implementation = "sdpa"  # verl's default flash attention needs CUDA


def refuse_unrunnable_vllm_sampler(cfg: TrainConfig) -> None:
    """`rollout.engine: vllm` on verl: the `aworld_cpu` rollout samples with vLLM's server. A GPU run
    samples with verl's own vLLM rollout already; separate_async's second replica is not served
    this way yet."""
    if cfg.rollout.engine != "vllm":
        return
    if not is_cpu_run(cfg):
        raise ConfigError(
            "rollout.engine: vllm picks the sampler of a CPU run (verl.trainer.device: cpu); on a GPU verl "
            "samples with its own vLLM rollout (actor_rollout_ref.rollout.name: vllm, the default): remove "
            "rollout.engine"
        )
    if _native(cfg, "trainer.v1.trainer_mode") == "separate_async":
        raise ConfigError(
            "rollout.engine: vllm with verl.trainer.v1.trainer_mode=separate_async: its two CPU replicas "
            "would each start a vLLM server; use sync or colocate_async, or remove rollout.engine"
        )


def vllm_sampler_extras(final: Any, cfg: TrainConfig, run_folder: Path) -> None:
    """`rollout.engine: vllm` as the `aworld_cpu` rollout's own engine keyword arguments (verl's
    `rollout.engine_kwargs.<rollout name>` extension point), read by its server (cpu/rollout.py)."""
    from omegaconf import open_dict

    from aworld_train.engines.verl.checks import lora_rank, lora_unmerged

    if cfg.rollout.engine != "vllm":
        return
    with open_dict(final):
        final.actor_rollout_ref.rollout.engine_kwargs[ROLLOUT] = {
            "sampler": "vllm",
            "kv_cache_gib": cfg.rollout.vllm_kv_cache_gib,
            "seed": cfg.trainer.seed,
            "run_folder": str(run_folder),
            # an adapter the actor does not merge is served as one of vLLM's own, of the rank it trains
            "lora_rank": lora_rank(final) if lora_unmerged(final) else None,
        }


def vllm_sampler_env(cfg: TrainConfig) -> dict[str, str]:
    """Ray kills a worker's child processes outright when the worker exits (SIGKILL), which leaves
    vLLM's shared memory in /dev/shm (hundreds of MB a run); without it, vLLM's server gets SIGTERM
    when its actor dies (its parent-death signal: rollout/policies/vllm_server.py) and shuts down
    whole."""
    return {"RAY_kill_child_processes_on_worker_exit": "false"} if cfg.rollout.engine == "vllm" else {}


def remove_vllm_weights(verl_folder: Path, timeout_s: float = 60.0) -> None:
    """The model folders the `aworld_cpu` rollout wrote for vLLM's server, once the servers that
    read them have shut down (their actor ends killed, with no chance to remove its own)."""
    import shutil
    import time

    folders = list(verl_folder.glob("aworld-train-vllm-*"))
    deadline = time.monotonic() + timeout_s
    while folders and _processes_naming(folders) and time.monotonic() < deadline:
        time.sleep(0.5)
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def _processes_naming(folders: list[Path]) -> list[int]:
    """The processes whose command line names one of `folders` (a vLLM server started from it)."""
    names = [str(folder) for folder in folders]
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            command = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(name in command for name in names):
            found.append(int(cmdline.parent.name))
    return found


def cpu_env() -> dict[str, str]:
    return {
        # verl imports the plugin in each of its processes (verl/__init__.py); it registers the
        # cpu platform and the aworld_cpu rollout
        "VERL_USE_EXTERNAL_MODULES": PLUGIN,
        "VERL_PLATFORM": "cpu",
        # verl registers its FSDP engine for cuda and npu only (workers/engine/fsdp/transformer_impl.py:1143);
        # these pick that registration (workers/engine/base.py:405-408), the engine then runs on the platform's cpu
        "VERL_ENGINE_DEVICE": "cuda",
        "VERL_ENGINE_VENDOR": "nvidia",
        "TOKENIZERS_PARALLELISM": "false",
    }


def sampler_derived(cfg: TrainConfig) -> list[Derived]:
    """verl's replay buffer with episode statuses in its metrics, replacing prompt groups that have
    no episode to train (engines/verl/episodes.py), in every trainer mode; a run may say
    `trainer.v1.sampler.sync_refill_failed_groups: false` to keep them.

    verl hands a custom sampler none of its DAPO group-filtering settings, so a run that enables
    them keeps verl's own replay buffer."""
    if _native(cfg, "algorithm.filter_groups.enable"):
        return []
    mode = _native(cfg, "trainer.v1.trainer_mode") or "sync"
    name = "EpisodeStatusSampler" if mode == "sync" else "EpisodeStatusSamplerAsync"
    refill = _native(cfg, "trainer.v1.sampler.sync_refill_failed_groups") is not False
    return [
        Derived("trainer.v1.sampler.custom_sampler.path", str(EPISODES_FILE)),
        Derived("trainer.v1.sampler.custom_sampler.name", name),
        Derived("trainer.v1.sampler.sync_refill_failed_groups", refill),
        Derived("trainer.v1.sampler.sampler_kwargs.refill_failed_groups", refill),
        Derived(
            "trainer.v1.sampler.sampler_kwargs.failed_groups_limit",
            cfg.trainer.stop_after_failed_steps * cfg.data.batch_size,
        ),
        Derived("trainer.v1.sampler.sampler_kwargs.groups_per_step", cfg.data.batch_size),
    ]
