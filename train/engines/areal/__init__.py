"""backend: areal: a rendered run folder launched with AReaL's single-controller trainer."""

from __future__ import annotations

from typing import Any

from aworld_train.engines.base import NativeInputs, RenderedRun, RunInputs


class ArealEngine:
    name = "areal"

    def native_inputs(self, config) -> NativeInputs:
        return NativeInputs()  # an `areal:` section never brings its own data or reward

    def render(self, inputs: RunInputs) -> RenderedRun:
        from aworld_train.engines.areal.render import render

        return render(inputs)

    def train(self, inputs: RunInputs, resume: bool = False) -> dict[str, Any]:
        from aworld_train.engines.native import launch_run

        return launch_run(self.render(inputs), inputs, ["recover.mode=auto"], resume)


ENGINE = ArealEngine()
