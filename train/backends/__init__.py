"""Training backends. Each module exposes `train(trainer, resume=False)`."""

from __future__ import annotations

import importlib

from aworld_train.errors import ConfigError

_MODULES = {
    "local": "aworld_train.backends.local",
    "verl": "aworld_train.backends.verl",
    "areal": "aworld_train.backends.areal",
}


def get_backend(name: str):
    if name not in _MODULES:
        raise ConfigError(f"unknown backend {name!r}; choose one of {', '.join(sorted(_MODULES))}")
    return importlib.import_module(_MODULES[name])
