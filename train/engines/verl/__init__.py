"""backend: verl: a rendered run folder launched with verl's own `main_ppo`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from aworld_train.engines.protocol import Capabilities, Engine
from aworld_train.inputs.run import NativeInputs, RenderedRun, RunInputs

if TYPE_CHECKING:
    from aworld_train.inputs.config import TrainConfig
    from aworld_train.rollout.samples.sft_data import SFTData


class VerlEngine(Engine):
    name = "verl"
    # a GPU run samples with verl's own rollout (actor_rollout_ref.rollout.name); a CPU run's
    # `aworld_cpu` rollout with transformers or, given rollout.engine: vllm, vLLM's server;
    # gigpo and discounted through verl's estimator registry (engines/verl/advantages.py)
    capabilities = Capabilities(sft=True, vllm_sampler=True, turn_advantages=True)

    def native_inputs(self, config) -> NativeInputs:
        from aworld_train.engines.verl.verl_config import native_inputs

        return native_inputs(config)

    def validate(self, config) -> None:
        from aworld_train.engines.verl.verl_config import validate_native

        validate_native(config)

    def render(self, inputs: RunInputs) -> RenderedRun:
        from aworld_train.engines.verl.render import render

        return render(inputs)

    def checks(self, inputs: RunInputs, run: RenderedRun | None = None) -> list:
        """The config renders (budgets, trainer), then the rendered run's checks. `run` is the
        render `run` already made; `check` renders here."""
        from aworld_train.core.errors import AworldTrainError
        from aworld_train.engines.verl.checks import preflight
        from aworld_train.engines.verl.render import render
        from aworld_train.prerun.checks import Check

        try:
            run = run or render(inputs)
        except AworldTrainError as exc:
            return [Check("verl config renders", False, str(exc))]
        return preflight(inputs, run)

    def train(self, inputs: RunInputs, resume: bool = False) -> dict[str, Any]:

        from aworld_train.core.errors import ConfigError, no_checkpoint_to_resume
        from aworld_train.engines.native import launch_run
        from aworld_train.engines.verl.cpu_run import remove_vllm_weights
        from aworld_train.engines.verl.step_lines import MismatchWatch
        from aworld_train.evaluation.verl_checkpoints import latest_verl_checkpoint

        def refuse_nothing_to_resume(run: RenderedRun) -> None:
            # verl's resume_mode=auto starts at step 0 without a word where it finds no checkpoint:
            # it reads the step its tracker file names, which it writes after the checkpoint (a
            # checkpoint cut short is not named there)
            folder = Path(run.final["trainer"]["default_local_dir"])
            if resume and latest_verl_checkpoint(folder) is None:
                raise ConfigError(no_checkpoint_to_resume(folder))

        try:
            return launch_run(
                self,
                inputs,
                ["trainer.resume_mode=auto"],
                resume,
                refuse=refuse_nothing_to_resume,
                # each step's rollout mismatch after verl's step line, warned above the tolerance
                watch=MismatchWatch(inputs.config.algorithm.mismatch_tolerance),
            )
        finally:
            remove_vllm_weights(inputs.run_dir / "verl")

    def sft(
        self, cfg: TrainConfig, data: SFTData, run_dir: Path, render_only: bool = False
    ) -> dict[str, Any]:
        """A rendered run of verl's own SFT trainer on `data`, launched unless `render_only`."""
        import subprocess

        from aworld_train.core.errors import EngineFailed
        from aworld_train.engines.verl.sft import render

        rendered = render(cfg, data.samples, run_dir)
        result: dict[str, Any] = {
            "backend": "verl",
            "run_folder": str(rendered.folder),
            "config": str(rendered.config_path),
            "command": " ".join(rendered.command),
        }
        if render_only:
            return result
        returncode = subprocess.run(rendered.command).returncode
        if returncode != 0:
            raise EngineFailed(
                f"verl's SFT trainer exited with status {returncode}: the run failed (its output is above; "
                f"run folder {rendered.folder})"
            )
        return result


ENGINE = VerlEngine()
