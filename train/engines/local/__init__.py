"""backend: local: GRPO in this process, a transformers model on CPU or one GPU."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from aworld_train.engines.protocol import Capabilities, Engine
from aworld_train.inputs.run import NativeInputs, RunInputs

if TYPE_CHECKING:
    from aworld_train.inputs.config import TrainConfig
    from aworld_train.rollout.samples.sft_data import SFTData


class LocalEngine(Engine):
    name = "local"
    capabilities = Capabilities(sft=True, vllm_sampler=True, policy_per_agent=True, turn_advantages=True)

    def native_inputs(self, config) -> NativeInputs:
        return NativeInputs()

    def validate(self, config) -> None:
        return None  # the common config is all it reads, and the config loader checked that

    def render(self, inputs: RunInputs) -> None:
        return None  # the local backend writes its run folder as it trains

    def train(self, inputs: RunInputs, resume: bool = False) -> dict[str, Any]:
        from aworld_train.engines.local.training import train

        return train(inputs, resume=resume)

    def sft(
        self, cfg: TrainConfig, data: SFTData, run_dir: Path, render_only: bool = False
    ) -> dict[str, Any]:
        """Supervised fine-tuning on `data` in this process (engines/local/sft.py)."""
        if render_only:
            return {
                "backend": "local",
                "samples": len(data.samples),
                "note": "nothing to render for backend local",
            }
        from aworld_train.engines.local.sft import fine_tune

        (run_dir / "config.yaml").write_text(cfg.render())
        return {
            "backend": "local",
            "data": data.summary(),
            **fine_tune(data.samples, cfg.model, cfg.sft, run_dir),
        }


ENGINE = LocalEngine()
