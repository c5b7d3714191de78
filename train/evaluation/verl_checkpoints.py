"""verl's run folders as checkpoints `aworld-train eval` loads.

verl saves `checkpoints/global_step_N/actor/` (its sharded FSDP state) and names the last whole one
in `checkpoints/latest_checkpointed_iteration.txt`, written after the checkpoint: a save cut short
is never named. A transformers loader reads the weights in `actor/huggingface/` only, and they are
there only where the run saved `hf_model` (`actor.checkpoint.save_contents`, which aworld-train's
render adds for full fine-tuning). verl writes config.json and the tokenizer to that folder in every
case, so config.json alone does not make it a model: the weights are looked for.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from aworld_train.core.errors import ModelError
from aworld_train.rollout.policies.models import dtype_setting, load_model

TRACKER = "latest_checkpointed_iteration.txt"
_STEP = re.compile(r"^global_step_(\d+)$")
_WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
_MERGER = "python -m verl.model_merger merge --backend fsdp --local_dir {actor} --target_dir OUT"


def latest_verl_checkpoint(folder: Path) -> Path | None:
    """The checkpoint verl's `resume_mode=auto` continues from: the step its tracker file names,
    where that folder exists; else None."""
    try:
        step = int((folder / TRACKER).read_text().strip())
    except (OSError, ValueError):
        return None
    path = folder / f"global_step_{step}"
    return path if path.is_dir() else None


def verl_model_folder(ref: str | Path) -> Path | None:
    """The transformers folder of a verl checkpoint `ref` names: a run folder or its `checkpoints/`
    (the latest whole checkpoint), a `global_step_N`, its `actor/` or `actor/huggingface/`; None
    where `ref` is none of these. A checkpoint without loadable weights is an error with the fix."""
    step = _step_folder(Path(ref).expanduser())
    if step is None:
        return None
    actor = step / "actor"
    if (actor / "lora_train_meta.json").is_file():
        raise ModelError(
            f"{step} is a verl checkpoint of a LoRA adapter, kept in verl's sharded format: "
            f"`{_MERGER.format(actor=actor)}` writes the base and OUT/lora_adapter/; merge the adapter "
            "into the base (peft's merge_and_unload) and pass that folder to --checkpoints"
        )
    model = actor / "huggingface"
    if not any((model / name).is_file() for name in _WEIGHTS):
        raise ModelError(
            f"{model} holds verl's model config and tokenizer but no weights: the run did not save "
            "hf_model (verl.actor_rollout_ref.actor.checkpoint.save_contents; aworld-train's render adds "
            f"it for full fine-tuning). Convert the checkpoint with `{_MERGER.format(actor=actor)}` and "
            "pass OUT to --checkpoints"
        )
    return model


def _step_folder(path: Path) -> Path | None:
    """The `global_step_N` folder `path` names, or None where it names no verl checkpoint."""
    if path.name == "huggingface" and path.parent.name == "actor":
        path = path.parent.parent
    elif path.name == "actor":
        path = path.parent
    if _STEP.match(path.name) and (path / "actor").is_dir():
        return path
    for folder in (path / "checkpoints", path):
        if (folder / TRACKER).is_file() or any(_STEP.match(p.name) for p in _children(folder)):
            latest = latest_verl_checkpoint(folder)
            if latest is None:
                raise ModelError(
                    f"{folder} holds no verl checkpoint that was saved whole ({TRACKER} names none that "
                    "exists): pass a global_step_N folder, or a run that saved one (trainer.save_every)"
                )
            return latest
    return None


def _children(folder: Path) -> list[Path]:
    return list(folder.iterdir()) if folder.is_dir() else []


def verl_label(model: Path) -> str | None:
    """`<run>/global_step_N` for a verl checkpoint's model folder, for the evaluation's table."""
    step = model.parent.parent
    if model.name == "huggingface" and model.parent.name == "actor" and _STEP.match(step.name):
        return f"{step.parent.parent.name}/{step.name}"
    return None


def sampling_dtype(model: str) -> Any:
    """float32 for a verl CPU run's weights, whose `aworld_cpu` rollout samples in float32, so that
    an evaluation samples what the run's own validation sampled; None (the loader's choice) for any
    other model, or where AWORLD_TRAIN_DTYPE decides."""
    path = Path(model)
    if verl_label(path) is None or dtype_setting() != "auto":
        return None
    # RUN/checkpoints/global_step_N/actor/huggingface: the run's render is RUN/verl/
    rendered = path.parents[3] / "verl" / "verl_config.yaml"
    try:
        final = yaml.safe_load(rendered.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    if (final.get("trainer") or {}).get("device") != "cpu":
        return None
    import torch

    return torch.float32


def verl_cpu_model(model: str) -> Any:
    """A verl CPU run's weights loaded as its rollout sampled with them (`sampling_dtype`); None for
    any other model (the caller loads it)."""
    dtype = sampling_dtype(model)
    return None if dtype is None else load_model(model, dtype=dtype)
