"""A local run's checkpoints: written whole or not at all, each holding the plan's policies (the
weights, a LoRA run's adapter and at the end its merged model too, or each policy's), the tokenizer,
the trainer's state and the random state; pruned to the last `trainer.save_total_limit` and the best;
and the one a resume continues found (refused before any model loads where there is none, or where it
holds another kind of training than the plan's) and restored, the run folder taken back to its step."""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

import aworld_train.engines.local.lora as lora
from aworld_train.core.atomic_files import complete_folder
from aworld_train.core.errors import ConfigError, no_checkpoint_to_resume
from aworld_train.engines.local.disk import disk_error, disk_full
from aworld_train.engines.local.display import console
from aworld_train.engines.local.run_folder import RunFolder
from aworld_train.rollout.policies.checkpoint_layout import (
    has_adapter,
    holds_policies,
    policy_folders,
    save_adapter,
)

if TYPE_CHECKING:
    from aworld_train.engines.local.startup import Parts
    from aworld_train.inputs.policy_plan import PolicyPlan


def save_checkpoint(
    plan: PolicyPlan, model_ref: str, folder: RunFolder, parts: Parts, step: int, final: bool = False
) -> Path:
    """The checkpoint of `step`: written as step_N.partial, its completion marker last, then
    renamed (atomic_files.complete_folder); a save cut short is never taken for a checkpoint.
    Each policy of the plan where checkpoint_layout.py keeps it: a run of one LoRA policy, its
    adapter, and in its `final` checkpoint the merged model (`model_ref` the base) too
    (`aworld-train export` merges a policy's)."""
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
            if plan.per_agent:
                parts.learner.save(tmp)  # each policy's, under its sampler's lock
            else:
                with parts.policy.lock:
                    if plan.lone_adapter:
                        save_adapter(parts.model, tmp)
                    else:
                        parts.model.save_pretrained(tmp)
            parts.tokenizer.save_pretrained(tmp)
            if final and plan.lone_adapter:
                dtype = parts.model.get_base_model().dtype  # in the dtype it trained in
                lora.export_merged(model_ref, tmp, tmp, parts.tokenizer, dtype)
            # through a Python file: torch's own writer reports a full disk without its errno
            with (tmp / "trainer_state.pt").open("wb") as f:
                torch.save(state, f)
    except Exception as exc:
        if disk_full(exc) is not None:
            raise disk_error(exc, f"saving checkpoint {path}", folder) from exc
        raise
    return path


def best_checkpoint_step(folder: RunFolder, steps: set[int]) -> int | None:
    """Of `steps` (the run's whole checkpoints), the one whose held-out accuracy, evaluated at
    that step, is the highest (the later on a tie); None where none was evaluated."""
    scored = [(row.get("accuracy"), row["step"]) for row in folder.history("eval") if row["step"] in steps]
    scored = [(accuracy, step) for accuracy, step in scored if accuracy is not None]
    return max(scored)[1] if scored else None


def prune_checkpoints(folder: RunFolder, keep_last: int | None) -> list[Path]:
    """Remove the whole checkpoints beyond the last `keep_last` and the best one; those removed.
    Checkpoints cut short are left to the resume that passes over them."""
    if keep_last is None:
        return []
    whole = [(step, path) for step, path, problem in folder.checkpoints() if problem is None]  # latest first
    kept = {step for step, _ in whole[:keep_last]}
    best = best_checkpoint_step(folder, {step for step, _ in whole})
    if best is not None:
        kept.add(best)
    removed = [path for step, path in whole if step not in kept]
    for path in removed:
        shutil.rmtree(path)
    return removed


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
