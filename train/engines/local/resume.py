"""Resuming a local run: which checkpoint it continues from (refused before any model loads where
there is none, or where it holds another kind of training), the trainer's state restored from it,
and the run folder taken back to its step; and the random state a checkpoint keeps."""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

import aworld_train.engines.local.lora as lora
from aworld_train.core.errors import ConfigError, no_checkpoint_to_resume
from aworld_train.engines.local.display import console
from aworld_train.engines.local.run_folder import RunFolder
from aworld_train.rollout.policies.checkpoint_layout import has_adapter, holds_policies, policy_folders

if TYPE_CHECKING:
    from aworld_train.inputs.policy_plan import PolicyPlan


def checkpoint_to_resume(folder: RunFolder, plan: PolicyPlan) -> Path:
    """The latest whole checkpoint of the run, which a resume continues; ConfigError where there is
    none or it holds another kind of training than the plan's (a LoRA adapter, every weight, a policy
    per agent)."""
    latest = folder.latest_checkpoint()
    if latest is None:
        raise ConfigError(no_checkpoint_to_resume(folder.path / "checkpoints") + skipped_note(folder))
    checkpoint = latest[1]
    if plan.per_agent:
        policy_folders(checkpoint, plan.names, plan.kind)  # each policy's, of the plan's kind
        return checkpoint
    if holds_policies(checkpoint):
        raise ConfigError(
            f"{checkpoint} holds an adapter per policy: the run trained with policies; resume it with the "
            "same policies"
        )
    lora_settings = plan.first.lora
    if lora_settings is None and has_adapter(checkpoint):
        raise ConfigError(
            f"{checkpoint} holds a LoRA adapter: the run trained with algorithm.lora; "
            "resume it with the same algorithm.lora settings"
        )
    if lora_settings is not None:
        lora.require_same_settings(checkpoint, lora_settings)  # and refuses a full-weight checkpoint
    return checkpoint


def restore(checkpoint: Path, folder: RunFolder, parts) -> int:
    """The trainer's state of `checkpoint` into `parts` (learner, policy, failure streaks), the
    random state as saved, and the run folder rewound to its step; that step."""
    state = torch.load(checkpoint / "trainer_state.pt", weights_only=False)
    parts.learner.load_state_dict(state["learner"])
    step = state["step"]
    parts.policy.version = state.get("version", step)
    restore_rng(state.get("rng"))
    parts.failures.load(state.get("failures"))
    parts.trained.load(state.get("trained"))
    # one line each, whatever the width: a log is read with grep
    console.print(f"resuming from {checkpoint} (step {step}){skipped_note(folder)}", soft_wrap=True)
    removed = folder.rewind(step)
    if removed:
        console.print(f"removed what steps after {step} left: {', '.join(removed)}", soft_wrap=True)
    return step


def skipped_note(folder: RunFolder) -> str:
    """Checkpoints a resume passes over, and why (each was being written when a run stopped)."""
    skipped = [f"{path.name}: {problem}" for _, path, problem in folder.checkpoints() if problem]
    return f"; incomplete checkpoint(s) passed over: {'; '.join(skipped)}" if skipped else ""


def rng_state() -> dict[str, Any]:
    """The random generators a step draws from, saved with its checkpoint (sampling itself is
    seeded per step; these cover anything else, such as dropout)."""
    import numpy as np

    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def restore_rng(state: dict[str, Any] | None) -> None:
    if not state:
        return
    import numpy as np

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
