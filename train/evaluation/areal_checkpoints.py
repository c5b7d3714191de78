"""AReaL runs' checkpoints for `aworld-train eval`: a run folder resolves to the latest folder AReaL's
saver wrote, and a saved folder loads as the run's policy server sampled from it.

AReaL's `Saver` writes `<fileroot>/checkpoints/<user>/<experiment>/<trial>/default/
epoch{E}epochstep{S}globalstep{G}/` (the weights after step G + 1, AReaL's version G + 1): the
Hugging Face weights and tokenizer, or with `actor.use_lora` the peft adapter alone
(`adapter_config.json`, `adapter_model.safetensors`), which loads on its base
(`base_model_name_or_path`) as the CPU policy server serves it (`rollout/policies/adapters.py`).
The run's file root, experiment and trial names are read from its `areal/areal_config.yaml`. A saved
folder loads in the dtype its tensors have, which is the one AReaL's actor computed in and the CPU
run's policy server sampled in (float32), whatever the loader's own default (bf16 on a GPU), so
that the figure reproduces. AWORLD_TRAIN_DTYPE, where set, decides instead.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any

import yaml

from aworld_train.core.errors import ModelError

AREAL_CONFIG = Path("areal") / "areal_config.yaml"
# AReaL's Saver.get_model_save_path
_SAVED = re.compile(r"^epoch\d+epochstep\d+globalstep(\d+)$")
_INTERPOLATION = re.compile(r"^\$\{([^}]+)\}$")
# safetensors' dtype names
_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}


def _value(config: dict[str, Any], dotted: str) -> Any:
    """A key of AReaL's config as its loader reads it (a whole-value `${key}` followed)."""
    node: Any = config
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    match = _INTERPOLATION.match(node) if isinstance(node, str) else None
    return _value(config, match.group(1)) if match else node


def is_saved_folder(path: Path) -> bool:
    """A folder AReaL's saver wrote, holding weights or an adapter."""
    held = (path / "config.json").is_file() or (path / "adapter_config.json").is_file()
    return bool(_SAVED.match(path.name)) and held


def areal_checkpoint(path: Path) -> Path | None:
    """`path` when it is a folder AReaL's saver wrote; for an AReaL run folder, the latest one (an
    error where it holds none); None for anything else."""
    if is_saved_folder(path):
        return path
    config_file = path / AREAL_CONFIG
    if not config_file.is_file():
        return None
    config = yaml.safe_load(config_file.read_text()) or {}
    fileroot, experiment, trial = (
        _value(config, f"saver.{key}") for key in ("fileroot", "experiment_name", "trial_name")
    )
    folders = Path(str(fileroot)).glob(f"checkpoints/*/{experiment}/{trial}/default/*")
    saved = [(int(m.group(1)), f) for f in folders if (m := _SAVED.match(f.name)) and is_saved_folder(f)]
    if not saved:
        raise ModelError(
            f"{path} is an AReaL run folder, but AReaL's saver wrote no checkpoint under {fileroot}/checkpoints "
            f"for {experiment}/{trial}: a run saves its last step (and every trainer.save_every); pass "
            "the run folder once it has finished"
        )
    return max(saved)[1]


def saved_dtype(folder: Path) -> str | None:
    """The dtype of the tensors in the folder's first safetensors file (None: none there)."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    with files[0].open("rb") as file:
        (size,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(size))
    dtypes = {entry["dtype"] for name, entry in header.items() if name != "__metadata__"}
    return _DTYPES.get(dtypes.pop()) if len(dtypes) == 1 else None


def areal_model(ref: str) -> tuple[str, Any] | None:
    """An AReaL checkpoint folder loaded as its run sampled from it: (what its tokenizer loads from,
    the model); None for any other reference."""
    from aworld_train.rollout.policies.models import dtype_setting, load_model

    folder = Path(ref).expanduser()
    if not is_saved_folder(folder):
        return None
    dtype = saved_dtype(folder) if dtype_setting() == "auto" else None
    if not (folder / "adapter_config.json").is_file():
        return str(folder), load_model(str(folder), dtype=_torch_dtype(dtype))
    from aworld_train.rollout.policies.adapters import serve_adapter

    base = json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"]
    model, _ = serve_adapter(load_model(base, dtype=_torch_dtype(dtype)), folder)
    return base, model


def _torch_dtype(name: str | None):
    import torch

    return getattr(torch, name) if name else None
