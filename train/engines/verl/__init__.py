"""backend: verl: a rendered run folder launched with verl's own `main_ppo`."""

from __future__ import annotations

from typing import Any

from aworld_train.engines.base import NativeInputs, RenderedRun, RunInputs


class VerlEngine:
    name = "verl"

    def native_inputs(self, config) -> NativeInputs:
        from aworld_train.engines.verl.render import native_inputs

        return native_inputs(config)

    def validate(self, config) -> None:
        from aworld_train.engines.verl.render import validate_native

        validate_native(config)

    def render(self, inputs: RunInputs) -> RenderedRun:
        from aworld_train.engines.verl.render import render

        return render(inputs)

    def checks(self, inputs: RunInputs, run: RenderedRun | None = None) -> list:
        """The config renders (budgets, trainer), then the rendered run's checks. `run` is the
        render `run` already made; `check` renders here."""
        from aworld_train.engines.verl.checks import preflight
        from aworld_train.engines.verl.render import render
        from aworld_train.errors import AworldTrainError
        from aworld_train.preflight import Check

        try:
            run = run or render(inputs)
        except AworldTrainError as exc:
            return [Check("verl config renders", False, str(exc))]
        return preflight(inputs, run)

    def train(self, inputs: RunInputs, resume: bool = False) -> dict[str, Any]:
        from aworld_train.engines.native import launch_run

        return launch_run(self, inputs, ["trainer.resume_mode=auto"], resume)


ENGINE = VerlEngine()
