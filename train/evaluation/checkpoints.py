"""Which model an evaluation's checkpoint reference loads, and its name in the table."""

from __future__ import annotations

import re
from pathlib import Path

from aworld_train.core.errors import ModelError
from aworld_train.rollout.policies.models import EMBEDDED_PREFIX

_STEP_DIR = re.compile(r"^step_(\d+)$")


def resolve_checkpoint(ref: str) -> str:
    """A model reference the loaders take: `embedded:<name>`, a model folder, or a run
    folder's latest checkpoint (`checkpoints/step_N` holding a model)."""
    if ref.startswith(EMBEDDED_PREFIX):
        return ref
    path = Path(ref).expanduser()
    if (path / "config.json").is_file():
        return str(path)
    steps = []
    if (path / "checkpoints").is_dir():
        for child in (path / "checkpoints").iterdir():
            match = _STEP_DIR.match(child.name)
            if match and (child / "config.json").is_file():
                steps.append((int(match.group(1)), child))
    if steps:
        return str(max(steps)[1])
    raise ModelError(
        f"checkpoint {ref!r} is not embedded:<name>, a model folder with config.json, or a run folder "
        "with checkpoints/step_N model folders; pass one of those to --checkpoints"
    )


def checkpoint_label(ref: str, resolved: str) -> str:
    """A short, file-name-safe name for the table: `run/step_000008`, `smollm2-135m`."""
    if ref.startswith(EMBEDDED_PREFIX):
        label = ref[len(EMBEDDED_PREFIX) :]
    else:
        path = Path(resolved)
        label = f"{path.parent.parent.name}/{path.name}" if _STEP_DIR.match(path.name) else path.name
    return re.sub(r"[^A-Za-z0-9_.@/-]+", "_", label) or "model"


def loadable(ref: str) -> bool:
    return ref.startswith(EMBEDDED_PREFIX) or (Path(ref).expanduser() / "config.json").is_file()


def checkpoint_labels(refs: list[str], resolved: list[str]) -> list[str]:
    """Each checkpoint's label, a repeated one numbered (`run/step_000008-2`)."""
    seen: dict[str, int] = {}
    out = []
    for label in (checkpoint_label(r, m) for r, m in zip(refs, resolved, strict=True)):
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label}-{seen[label]}")
    return out
