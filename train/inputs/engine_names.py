"""The engines a run can train on, by name: the module whose ENGINE implements each. A leaf: the
config validates `backend:` against it without importing the engines (they import the config)."""

from __future__ import annotations

ENGINE_MODULES: dict[str, str] = {
    "local": "aworld_train.engines.local",
    "verl": "aworld_train.engines.verl",
    "areal": "aworld_train.engines.areal",
}
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINE_MODULES)
