"""The engines a run trains on, behind one protocol and one registry.

The config validates `backend:` against `ENGINE_NAMES`, the CLI and the facade get
an engine with `get_engine`. Engines are imported only when asked for: verl's and
AReaL's packages are heavy, and a local run must not need them.
"""

from __future__ import annotations

import importlib

from aworld_train.core.errors import ConfigError
from aworld_train.engines.protocol import Capabilities, Engine
from aworld_train.inputs.engine_names import ENGINE_MODULES, ENGINE_NAMES
from aworld_train.inputs.run import NativeInputs, RenderedRun, RunInputs


def get_engine(name: str) -> Engine:
    if name not in ENGINE_MODULES:
        raise ConfigError(f"unknown backend {name!r}; choose one of {', '.join(ENGINE_NAMES)}")
    return importlib.import_module(ENGINE_MODULES[name]).ENGINE


__all__ = ["ENGINE_NAMES", "Capabilities", "Engine", "NativeInputs", "RenderedRun", "RunInputs", "get_engine"]
