"""A `cpu` platform for verl's PlatformRegistry.

verl asks its platform for the torch device, the collective backend and the Ray
resource that counts a worker slot. On this platform the device is "cpu", the
collectives are gloo, and a slot is Ray's logical "GPU" resource: the renderer
declares `ray_init.num_gpus` slots, so verl's placement groups and resource checks
work unchanged while nothing touches CUDA.
"""

from __future__ import annotations

import contextlib
import os
import types
from typing import Any

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

PLATFORM = "cpu"


def _device_module() -> types.ModuleType:
    """torch.cpu plus the torch.cuda-style calls verl makes on `get_torch_device()`; none
    has anything to do on a CPU, and memory queries report nothing allocated."""
    mod = types.ModuleType("aworld_train_cpu_device")
    for name in dir(torch.cpu):
        if not name.startswith("_"):
            setattr(mod, name, getattr(torch.cpu, name))
    nothing = lambda *args, **kwargs: None  # noqa: E731
    zero = lambda *args, **kwargs: 0  # noqa: E731
    mod.is_available = lambda: True
    mod.device_count = lambda: 1
    mod.current_device = lambda: "cpu"
    for name in ("set_device", "synchronize", "empty_cache", "reset_peak_memory_stats"):
        setattr(mod, name, nothing)
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
        setattr(mod, name, zero)
    mod.manual_seed = torch.manual_seed
    mod.manual_seed_all = torch.manual_seed
    mod.get_rng_state = torch.get_rng_state
    mod.set_rng_state = torch.set_rng_state
    mod.mem_get_info = lambda *args, **kwargs: (0, 0)
    mod.get_device_name = lambda *args, **kwargs: "cpu"
    mod.is_bf16_supported = lambda *args, **kwargs: True
    return mod


_DEVICE = _device_module()


@PlatformRegistry.register(platform=PLATFORM)
class PlatformCPU(PlatformBase):
    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return _DEVICE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # never auto-detected: a GPU machine must not fall onto it

    def current_device(self) -> str:
        return "cpu"  # verl passes it to .to()/device=; an int would name an accelerator

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[None, None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"  # logical slots: see the module docstring

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> None:
        return None


def selected() -> bool:
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM


def _gloo_process_group() -> None:
    """verl/utils/distributed.py:89 builds the backend "cpu:gloo,<device>:<backend>", which on
    this platform is "cpu:gloo,cpu:gloo" and torch refuses a device named twice. The one
    monkeypatch of this package: the default becomes plain "gloo". It must run before
    verl/workers/engine_workers.py:38 imports the function by name, which it does because verl
    imports this plugin at the end of its own __init__."""
    from verl.utils import distributed

    original = distributed.initialize_global_process_group_ray
    if getattr(original, "aworld_train_gloo", False):
        return

    def initialize(timeout_second=None, backend=None):
        return original(timeout_second=timeout_second, backend=backend or "gloo")

    initialize.aworld_train_gloo = True
    distributed.initialize_global_process_group_ray = initialize


if selected():
    _gloo_process_group()
