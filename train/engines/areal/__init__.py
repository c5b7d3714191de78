"""backend: areal: a rendered run folder launched with AReaL's single-controller trainer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aworld_train.engines.protocol import Capabilities, Engine
from aworld_train.inputs.run import NativeInputs, RenderedRun, RunInputs


class ArealEngine(Engine):
    name = "areal"
    # a GPU run's rollouts are sampled by the inference server AReaL drives; a CPU run's by ours, or
    # with rollout.engine: vllm by vLLM's server behind AReaL's vLLM routes
    capabilities = Capabilities(vllm_sampler=True, turn_advantages=True)

    def native_inputs(self, config) -> NativeInputs:
        return NativeInputs()  # an `areal:` section never brings its own data or reward

    def validate(self, config) -> None:
        from aworld_train.core.errors import ConfigError
        from aworld_train.engines.areal.cpu_run import refuse_cpu_lora, refuse_unrunnable_vllm_sampler
        from aworld_train.engines.areal.facade import facade_limits
        from aworld_train.engines.areal.render import validate_native

        validate_native(config.areal)
        limits = facade_limits(config, config.fields_set())
        if limits:
            raise ConfigError("AReaL cannot honour: " + "; ".join(limits))
        refuse_cpu_lora(config)
        refuse_unrunnable_vllm_sampler(config)

    def checks(self, inputs: RunInputs, run: RenderedRun | None = None) -> list:
        from aworld_train.engines.areal.checks import preflight

        return preflight(inputs, run)

    def render(self, inputs: RunInputs) -> RenderedRun:
        from aworld_train.engines.areal.render import render

        return render(inputs)

    def train(self, inputs: RunInputs, resume: bool = False) -> dict[str, Any]:
        from aworld_train.core.errors import ConfigError, no_checkpoint_to_resume
        from aworld_train.engines.areal.render import recover_data
        from aworld_train.engines.native import launch_run

        def refuse_stale_recover_data(run: RenderedRun) -> None:
            # the rendered config recovers automatically (recover.mode: auto): only when asked
            found = recover_data(run.final)
            if resume and not found:
                raise ConfigError(
                    no_checkpoint_to_resume(Path(run.final["cluster"]["fileroot"]) / "checkpoints")
                )
            if found and not resume:
                raise ConfigError(
                    f"{inputs.run_dir} holds AReaL recover data ({found[0]}): pass --resume to continue "
                    "that run, or choose another trainer.run_dir"
                )

        return launch_run(self, inputs, [], resume, refuse=refuse_stale_recover_data)


ENGINE = ArealEngine()
