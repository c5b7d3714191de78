"""Which model an evaluation's checkpoint reference loads (a checkpoint with a policy per agent: its
run's plan, each agent's calls to its policy), and its name in the table."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from aworld_train.core.errors import ModelError
from aworld_train.evaluation.areal_checkpoints import areal_checkpoint
from aworld_train.evaluation.verl_checkpoints import verl_label, verl_model_folder
from aworld_train.inputs.policy_plan import PolicyPlan, saved_plan
from aworld_train.rollout.policies.checkpoint_layout import (
    holds_policy,
    load_policy_adapters,
    policy_folders,
    saved_policies,
)
from aworld_train.rollout.policies.models import EMBEDDED_PREFIX
from aworld_train.rollout.policies.router import PolicyRouter

if TYPE_CHECKING:
    from aworld_train.rollout.episodes.runner import EpisodeRunner

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
    if holds_policy(path):
        return str(path)
    saved = areal_checkpoint(path)  # an AReaL run folder's latest saved folder, or one such folder
    if saved is not None:
        return str(saved)
    steps = []
    if (path / "checkpoints").is_dir():
        for child in (path / "checkpoints").iterdir():
            match = _STEP_DIR.match(child.name)
            if match and holds_policy(child):
                steps.append((int(match.group(1)), child))
    if steps:
        return str(max(steps)[1])
    raise ModelError(
        f"checkpoint {ref!r} is not embedded:<name>, a model folder with config.json, a checkpoint with "
        "policies/<name>/ adapters, a run folder with checkpoints/step_N of those, or a verl run "
        "folder (checkpoints/global_step_N); pass one of them to "
        "--checkpoints"
    )


def team_checkpoint(checkpoint: str) -> tuple[str, PolicyPlan] | None:
    """A checkpoint of a run with a policy per agent: its base model and the run's policy plan
    (from its run folder's config.yaml); None for any other."""
    config = Path(checkpoint).resolve().parents[1] / "config.yaml"
    if not saved_policies(Path(checkpoint)):
        return None
    if not config.is_file():
        raise ModelError(
            f"{checkpoint} holds an adapter per policy but no run config.yaml beside it names the base"
        )
    run = yaml.safe_load(config.read_text()) or {}
    return str(run["model"]), saved_plan(run)


def team_runner(checkpoint: str, spec, rollout, reward) -> tuple[EpisodeRunner, PolicyRouter] | None:
    """(runner, router) for a checkpoint of a run with a policy per agent: the base with every
    policy's adapter, or each policy's own model, each agent's calls to its own; None for any other."""
    from aworld_train.rollout.episodes.runner import local_runner
    from aworld_train.rollout.policies.adapter_policy import adapter_policies
    from aworld_train.rollout.policies.models import load_model

    team = team_checkpoint(checkpoint)
    if team is None:
        return None
    base, plan = team
    folders = policy_folders(Path(checkpoint), plan.names, plan.kind)
    if plan.kind == "full":
        models = {name: load_model(str(folder)) for name, folder in folders.items()}
        runner, first = local_runner(spec, base, rollout, reward, model=models[plan.first.name])
        samplers = {name: first if m is first.model else first.sibling(m) for name, m in models.items()}
        return runner, PolicyRouter.of(samplers, plan.owner)
    model = load_policy_adapters(load_model(base), folders)
    runner, policy = local_runner(spec, base, rollout, reward, model=model)
    return runner, PolicyRouter.of(adapter_policies(policy, plan.names), plan.owner)


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
    return ref.startswith(EMBEDDED_PREFIX) or holds_policy(Path(ref).expanduser())


def checkpoint_labels(refs: list[str], resolved: list[str]) -> list[str]:
    """Each checkpoint's label, a repeated one numbered (`run/step_000008-2`)."""
    seen: dict[str, int] = {}
    out = []
    for label in (checkpoint_label(r, m) for r, m in zip(refs, resolved, strict=True)):
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label}-{seen[label]}")
    return out
