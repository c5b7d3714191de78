"""Where a checkpoint keeps its policies' weights: the one module that knows the folders.

A run of one policy keeps its weights at the checkpoint's top (a full model: config.json and the
weights) or, trained as a LoRA adapter, in `adapter/` (peft's folder: adapter_config.json and
adapter_model.safetensors). A run with a policy per agent (`policies:`) keeps each policy's adapter,
or each policy's full model, in `policies/<name>/`. Training saves and resumes through here; `eval`,
`export` and the viewer find a checkpoint's policies through here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from aworld_train.core.errors import ConfigError

PolicyKind = Literal["adapter", "full"]  # a LoRA adapter on the shared base, or a model of its own

POLICIES_DIR = "policies"  # a run with a policy per agent: policies/<name>/ each
ADAPTER_DIR = "adapter"  # a run of one LoRA policy: its adapter
_MARKER: dict[PolicyKind, str] = {"adapter": "adapter_config.json", "full": "config.json"}


def holds_model(checkpoint: Path) -> bool:
    """A full model at the checkpoint's top (a run of one full-weight policy, or a merged one)."""
    return (Path(checkpoint) / _MARKER["full"]).is_file()


def holds_policy(checkpoint: Path) -> bool:
    """Weights an evaluation can load: a model at the top, or a folder per policy."""
    return holds_model(checkpoint) or bool(saved_policies(checkpoint))


def holds_policies(checkpoint: Path) -> bool:
    """The checkpoint of a run with a policy per agent (its `policies/` folder)."""
    return (Path(checkpoint) / POLICIES_DIR).is_dir()


def saved_policy_adapters(checkpoint: Path) -> dict[str, Path]:
    """A checkpoint's adapter folder per policy (a run with `policies:`); empty for any other."""
    return _saved(checkpoint, "adapter")


def saved_policies(checkpoint: Path) -> dict[str, Path]:
    """A checkpoint's folder per policy, its adapters or else its full models; empty for a run of
    one policy."""
    return saved_policy_adapters(checkpoint) or _saved(checkpoint, "full")


def _saved(checkpoint: Path, kind: PolicyKind) -> dict[str, Path]:
    folder = Path(checkpoint) / POLICIES_DIR
    found = sorted(f.parent for f in folder.glob(f"*/{_MARKER[kind]}")) if folder.is_dir() else []
    return {f.name: f for f in found}


def policy_folder(checkpoint: Path, name: str, kind: PolicyKind) -> Path:
    """Policy `name`'s folder in `checkpoint` holding its `kind` of weights; ConfigError where it
    holds none."""
    folder, marker = Path(checkpoint) / POLICIES_DIR / name, _MARKER[kind]
    if not (folder / marker).is_file():
        raise ConfigError(
            f"{checkpoint} holds no {'adapter' if kind == 'adapter' else 'model'} of policy "
            f"{name!r} ({POLICIES_DIR}/{name}/{marker}): the run trained other policies, or the other kind; "
            "resume it with the policies it saved, or start a new run folder"
        )
    return folder


def policy_folders(checkpoint: Path, names: list[str], kind: PolicyKind) -> dict[str, Path]:
    """Each policy's folder of `names` in `checkpoint`; ConfigError where one holds no `kind` of weights."""
    return {name: policy_folder(checkpoint, name, kind) for name in names}


def has_adapter(checkpoint: Path) -> bool:
    """The checkpoint of a run of one LoRA policy (its `adapter/` folder)."""
    return (Path(checkpoint) / ADAPTER_DIR / _MARKER["adapter"]).is_file()


def adapter_folder(checkpoint: Path) -> Path:
    """The adapter folder of a LoRA checkpoint; a checkpoint without one is an error."""
    folder = Path(checkpoint) / ADAPTER_DIR
    if not has_adapter(checkpoint):
        raise ConfigError(
            f"{checkpoint} holds no LoRA adapter ({ADAPTER_DIR}/adapter_config.json): a full-weight run saved "
            "it; resume it without algorithm.lora, or start a new run folder"
        )
    return folder


def adapter_bytes(checkpoint: Path) -> int:
    return sum(f.stat().st_size for f in (Path(checkpoint) / ADAPTER_DIR).iterdir() if f.is_file())


def save_adapter(model, checkpoint: Path) -> None:
    """A run of one LoRA policy: its adapter into `checkpoint/adapter/`."""
    model.save_pretrained(Path(checkpoint) / ADAPTER_DIR)


def save_policy_adapters(model, checkpoint: Path, names: list[str]) -> None:
    """The adapters `names` of `model` (the base holding one per policy) into `policies/<name>/`."""
    # peft writes each named adapter into a folder of its name
    model.save_pretrained(Path(checkpoint) / POLICIES_DIR, selected_adapters=names)


def save_policy_model(model, checkpoint: Path, name: str) -> None:
    """Policy `name`'s full model into `policies/<name>/`."""
    model.save_pretrained(Path(checkpoint) / POLICIES_DIR / name)


def load_policy_adapters(model, folders: dict[str, Path], trainable: bool = False):
    """`model` (the base) holding each policy's adapter saved in `folders`, the first one active."""
    from peft import PeftModel

    names = list(folders)
    model = PeftModel.from_pretrained(
        model,
        str(folders[names[0]]),
        adapter_name=names[0],
        is_trainable=trainable,
        autocast_adapter_dtype=False,
    )
    for name in names[1:]:
        model.load_adapter(
            str(folders[name]), adapter_name=name, is_trainable=trainable, autocast_adapter_dtype=False
        )
    model.set_adapter(names[0])
    return model
