"""A local run's checkpoints: each written whole or not at all, holding its plan's policies (the
weights, a LoRA run's adapter and at the end its merged model too, or each policy's), the tokenizer
and the trainer's state; the run keeps the last `trainer.save_total_limit` of them and its best."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import torch

import aworld_train.engines.local.lora as lora
from aworld_train.core.atomic_files import complete_folder
from aworld_train.engines.local.disk import disk_error, disk_full
from aworld_train.engines.local.resume import rng_state
from aworld_train.engines.local.run_folder import RunFolder
from aworld_train.rollout.policies.checkpoint_layout import save_adapter

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
