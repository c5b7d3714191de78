"""Which model an evaluation's checkpoint reference loads, and its name in the table."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from aworld_train.core.errors import ModelError
from aworld_train.evaluation.areal_checkpoints import areal_checkpoint
from aworld_train.evaluation.verl_checkpoints import verl_label, verl_model_folder
from aworld_train.rollout.policies.adapter_policy import saved_policy_adapters, saved_policy_models
from aworld_train.rollout.policies.models import EMBEDDED_PREFIX

_STEP_DIR = re.compile(r"^step_(\d+)$")


def resolve_checkpoint(ref: str) -> str:
    """A model reference the loaders take: `embedded:<name>`, a model folder, a checkpoint of a
    run with a policy per agent (`policies/<name>/` adapters), or a run folder's latest checkpoint
    (`checkpoints/step_N` holding either), or a verl run's (evaluation/verl_checkpoints.py)."""
    if ref.startswith(EMBEDDED_PREFIX):
        return ref
    path = Path(ref).expanduser()
    verl = verl_model_folder(path)  # before config.json: verl's actor/huggingface/ has one without weights
    if verl is not None:
        return str(verl)
    if _holds_policy(path):
        return str(path)
    saved = areal_checkpoint(path)  # an AReaL run folder's latest saved folder, or one such folder
    if saved is not None:
        return str(saved)
    steps = []
    if (path / "checkpoints").is_dir():
        for child in (path / "checkpoints").iterdir():
            match = _STEP_DIR.match(child.name)
            if match and _holds_policy(child):
                steps.append((int(match.group(1)), child))
    if steps:
        return str(max(steps)[1])
    raise ModelError(
        f"checkpoint {ref!r} is not embedded:<name>, a model folder with config.json, a checkpoint with "
        "policies/<name>/ adapters, a run folder with checkpoints/step_N of those, or a verl run "
        "folder (checkpoints/global_step_N); pass one of them to "
        "--checkpoints"
    )


def _holds_policy(path: Path) -> bool:
    return (path / "config.json").is_file() or bool(saved_policy_adapters(path) or saved_policy_models(path))


def team_checkpoint(checkpoint: str) -> tuple[str, dict[str, str], dict[str, Path]] | None:
    """A checkpoint of a run with a policy per agent: its base model and each agent's policy (from
    its run folder's config.yaml), and each policy's adapter folder (or model folder, a run with a
    full model per policy); None for any other."""
    adapters = saved_policy_adapters(Path(checkpoint)) or saved_policy_models(Path(checkpoint))
    config = Path(checkpoint).resolve().parents[1] / "config.yaml"
    if not adapters:
        return None
    if not config.is_file():
        raise ModelError(
            f"{checkpoint} holds an adapter per policy but no run config.yaml beside it names the base"
        )
    run = yaml.safe_load(config.read_text()) or {}
    owner = {
        a: name for name, policy in (run.get("policies") or {}).items() for a in policy.get("agents") or []
    }
    return str(run["model"]), owner, adapters


def checkpoint_label(ref: str, resolved: str) -> str:
    """A short, file-name-safe name for the table: `run/step_000008`, `smollm2-135m`."""
    if ref.startswith(EMBEDDED_PREFIX):
        label = ref[len(EMBEDDED_PREFIX) :]
    else:
        path = Path(resolved)
        label = verl_label(path) or (
            f"{path.parent.parent.name}/{path.name}" if _STEP_DIR.match(path.name) else path.name
        )
    return re.sub(r"[^A-Za-z0-9_.@/-]+", "_", label) or "model"


def loadable(ref: str) -> bool:
    return ref.startswith(EMBEDDED_PREFIX) or _holds_policy(Path(ref).expanduser())


def checkpoint_labels(refs: list[str], resolved: list[str]) -> list[str]:
    """Each checkpoint's label, a repeated one numbered (`run/step_000008-2`)."""
    seen: dict[str, int] = {}
    out = []
    for label in (checkpoint_label(r, m) for r, m in zip(refs, resolved, strict=True)):
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label}-{seen[label]}")
    return out
