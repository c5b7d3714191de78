"""aworld-train: train AWorld agents with GRPO on verl, AReaL or a built-in local backend."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["AgentTrainer", "TrainConfig", "load_config", "__version__"]

from aworld_train.aworld.console import quiet_aworld_console  # noqa: E402

quiet_aworld_console()  # before a user's module imports AWorld, or after a script already did


def __getattr__(name: str):
    # Lazy: importing the package must not import AWorld or torch.
    if name == "AgentTrainer":
        from aworld_train.facade.trainer import AgentTrainer

        return AgentTrainer
    if name in ("TrainConfig", "load_config"):
        from aworld_train.inputs import config

        return getattr(config, name)
    raise AttributeError(name)
