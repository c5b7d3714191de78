"""backend: local: GRPO in this process, a transformers model on CPU or one GPU."""

from __future__ import annotations

from typing import Any

from aworld_train.engines.base import NativeInputs, RunInputs


class LocalEngine:
    name = "local"

    def native_inputs(self, config) -> NativeInputs:
        return NativeInputs()

    def validate(self, config) -> None:
        return None  # the common config is all it reads, and the config loader checked that

    def render(self, inputs: RunInputs) -> None:
        return None  # the local backend writes its run folder as it trains

    def train(self, inputs: RunInputs, resume: bool = False) -> dict[str, Any]:
        from aworld_train.engines.local.training import train

        return train(inputs, resume=resume)


ENGINE = LocalEngine()
