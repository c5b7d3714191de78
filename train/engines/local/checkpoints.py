"""A local run's checkpoints: each written whole or not at all, holding the weights (or a LoRA
run's adapter, and at the end its merged model too), the tokenizer and the trainer's state."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

import aworld_train.engines.local.lora as lora
from aworld_train.core.atomic_files import complete_folder
from aworld_train.engines.local.disk import disk_error, disk_full
from aworld_train.engines.local.resume import rng_state
from aworld_train.engines.local.run_folder import RunFolder

if TYPE_CHECKING:
    from aworld_train.engines.local.startup import Parts
    from aworld_train.inputs.config import TrainConfig


def save_checkpoint(
    cfg: TrainConfig, folder: RunFolder, parts: Parts, step: int, final: bool = False
) -> Path:
    """The checkpoint of `step`: written as step_N.partial, its completion marker last, then
    renamed (atomic_files.complete_folder); a save cut short is never taken for a checkpoint.
    A LoRA run saves its adapter; its `final` checkpoint also holds the merged model."""
    path = folder.checkpoint_dir(step)
    state = {
        "step": step,
        "version": parts.policy.version,
        "learner": parts.learner.state_dict(),
        "rng": rng_state(),
        "failures": parts.failures.state(),
        "trained": parts.trained.state(),
    }
    try:
        with complete_folder(path, step=step) as tmp:
            with parts.policy.lock:
                if cfg.algorithm.lora is None:
                    parts.model.save_pretrained(tmp)
                else:
                    lora.save_adapter(parts.model, tmp)
            parts.tokenizer.save_pretrained(tmp)
            if final and cfg.algorithm.lora is not None:
                dtype = parts.model.get_base_model().dtype  # in the dtype it trained in
                lora.export_merged(cfg.model, tmp, tmp, parts.tokenizer, dtype)
            # through a Python file: torch's own writer reports a full disk without its errno
            with (tmp / "trainer_state.pt").open("wb") as f:
                torch.save(state, f)
    except Exception as exc:
        if disk_full(exc) is not None:
            raise disk_error(exc, f"saving checkpoint {path}", folder) from exc
        raise
    return path
