"""The engines a run trains on, behind one protocol and one registry.

The config validates `backend:` against `ENGINE_NAMES`, the CLI and the facade get
an engine with `get_engine`. Engines are imported only when asked for: verl's and
AReaL's packages are heavy, and a local run must not need them.
"""

from __future__ import annotations

import importlib

from aworld_train.engines.base import Engine, NativeInputs, RenderedRun, RunInputs
from aworld_train.errors import ConfigError

# name -> module whose ENGINE attribute implements the Engine protocol
_REGISTRY: dict[str, str] = {
    "local": "aworld_train.engines.local",
    "verl": "aworld_train.engines.verl",
    "areal": "aworld_train.engines.areal",
}
ENGINE_NAMES: tuple[str, ...] = tuple(_REGISTRY)


def get_engine(name: str) -> Engine:
    if name not in _REGISTRY:
        raise ConfigError(f"unknown backend {name!r}; choose one of {', '.join(ENGINE_NAMES)}")
    return importlib.import_module(_REGISTRY[name]).ENGINE


__all__ = ["ENGINE_NAMES", "Engine", "NativeInputs", "RenderedRun", "RunInputs", "get_engine"]
