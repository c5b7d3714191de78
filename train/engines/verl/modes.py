"""verl's V1 trainer modes (`verl.trainer.v1.trainer_mode`): what each needs, checked on the
composed config before anything launches, and the one line `aworld-train check` explains it with.

- `sync`: a step samples its groups with the current weights, then trains (on-policy).
- `colocate_async`: rollout shares the trainer's slots; the next step's groups are sampled while
  the actor trains, and a request cut by a weight update resumes on the new weights (verl's
  partial rollout). verl 0.9.1: v1/trainer_colocate_async.py.
- `separate_async`: rollout runs on slots of its own (`actor_rollout_ref.rollout.nnodes` x
  `n_gpus_per_node`); the actor pushes its weights there every `parameter_sync_step` local updates
  through a checkpoint engine other than `naive`. verl's hybrid replica on the trainer's slots
  serves too until the first step begins; `actor_rollout_ref.hybrid_engine: false` would leave those
  slots to training alone, but verl 0.9.1 then fails at setup unless it logs at WARN (refused
  below). verl 0.9.1: v1/trainer_separate_async.py.

In both asynchronous modes a prompt group is as old as the steps since it was submitted; past
`trainer.v1.sampler.max_off_policy_threshold` it is dropped (`max_off_policy_strategy: drop`,
logged as training/off_policy/evicted_samples) or waited for (`wait`). verl logs each step's
staleness as training/off_policy/trajectory_staleness; `algorithm.rollout_correction` weighs
stale tokens by the ratio of the actor's probability to the rollout's (our recorded logprobs).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from aworld_train.core.errors import ConfigError
from aworld_train.engines.native import BLANK, get
from aworld_train.inputs.run import RunInputs

MODES = ("sync", "colocate_async", "separate_async")
MINI_BATCH = "actor_rollout_ref.actor.ppo_mini_batch_size"


def mode_of(final: Any) -> str:
    return str(final.trainer.v1.trainer_mode)


def parameter_sync_step(final: Any) -> int:
    """Local updates per weight push: verl reads it from the mode's own section, 1 where it has none."""
    section = final.trainer.v1.get(mode_of(final)) or {}
    return int(section.get("parameter_sync_step", 1) or 1)


def require_trainer_mode(final: Any, inputs: RunInputs) -> None:
    """Refuse what verl's trainer of the chosen mode would refuse once started (or silently not do),
    with the fix; derive the mini-batch the mode needs where the user set none."""
    from omegaconf import OmegaConf

    mode = mode_of(final)
    key = "verl.trainer.v1.trainer_mode"
    if mode not in MODES:
        raise ConfigError(f"{key}={mode!r}: verl's V1 trainer has {', '.join(MODES)}")
    rollout = final.actor_rollout_ref.rollout
    if not final.actor_rollout_ref.get("hybrid_engine", True) and mode != "separate_async":
        raise ConfigError(
            f"verl.actor_rollout_ref.hybrid_engine=false serves rollout from standalone replicas only, "
            f"which only trainer_mode separate_async has ({key}={mode}): set {key}=separate_async, "
            "or remove hybrid_engine"
        )
    _require_sampler(final.trainer.v1.sampler)
    if mode == "separate_async":
        _require_separate_resources(final, rollout)
    steps = parameter_sync_step(final)
    batch = int(final.data.train_batch_size)
    if batch % steps:
        raise ConfigError(
            f"data.batch_size={batch} is not a multiple of verl.trainer.v1.{mode}.parameter_sync_step={steps} "
            "(the local updates per weight push, each on an equal share of the batch): choose a "
            "parameter_sync_step that divides data.batch_size (1 pushes after every update)"
        )
    if mode == "separate_async":
        # verl's separate trainer asserts train_batch_size == parameter_sync_step * ppo_mini_batch_size
        if get(inputs.config.verl, MINI_BATCH) in BLANK:
            OmegaConf.update(final, MINI_BATCH, batch // steps)
        elif int(OmegaConf.select(final, MINI_BATCH)) * steps != batch:
            raise ConfigError(
                f"verl.{MINI_BATCH}={OmegaConf.select(final, MINI_BATCH)}: trainer_mode separate_async "
                f"trains one mini-batch per local update, so it must be data.batch_size / "
                f"parameter_sync_step = {batch} / {steps}; remove it (it is derived) or change either"
            )


def _require_sampler(sampler: Any) -> None:
    """verl's replay-buffer bound: a whole number of steps, and what to do with a group past it."""
    threshold = sampler.max_off_policy_threshold
    if threshold is not None and (
        not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < 1
    ):
        raise ConfigError(
            f"verl.trainer.v1.sampler.max_off_policy_threshold={threshold!r}: the steps a prompt group may "
            "age before it is dropped or waited for, a whole number of at least 1, or null for no bound"
        )
    if sampler.max_off_policy_strategy not in ("drop", "wait"):
        raise ConfigError(
            f"verl.trainer.v1.sampler.max_off_policy_strategy={sampler.max_off_policy_strategy!r}: "
            "drop (evict a group past the threshold and sample a fresh one) or wait (train it, waiting for it)"
        )


def _require_separate_resources(final: Any, rollout: Any) -> None:
    """separate_async's standalone rollout: its own resources, and a checkpoint engine that feeds it."""
    if int(rollout.nnodes) < 1 or int(rollout.n_gpus_per_node) < 1:
        raise ConfigError(
            "trainer_mode separate_async runs its rollout on resources of its own: set "
            "verl.actor_rollout_ref.rollout.nnodes and n_gpus_per_node (the rollout's GPUs, beside "
            f"trainer.n_gpus_per_node); now {rollout.nnodes} x {rollout.n_gpus_per_node}"
        )
    if not final.actor_rollout_ref.get("hybrid_engine", True) and _verl_logs_info():
        raise ConfigError(
            "verl.actor_rollout_ref.hybrid_engine=false: verl 0.9.1's separate trainer then fails at "
            "setup (v1/trainer_separate_async.py:181 passes flush= to logger.info, a TypeError while "
            "verl logs at INFO): keep hybrid_engine true (its replica on the trainer's slots serves "
            "until the first step), or set VERL_LOGGING_LEVEL=WARN in the environment"
        )
    if rollout.checkpoint_engine.backend == "naive":
        raise ConfigError(
            "trainer_mode separate_async pushes the actor's weights to its standalone rollout through a "
            "checkpoint engine, and `naive` serves colocated replicas only: set "
            "verl.actor_rollout_ref.rollout.checkpoint_engine.backend=nccl (on a CPU run: aworld_cpu)"
        )


def _verl_logs_info() -> bool:
    """Whether verl's module loggers log INFO (they take VERL_LOGGING_LEVEL, INFO by default)."""
    level = logging.getLevelName(os.environ.get("VERL_LOGGING_LEVEL", "INFO").upper())
    return not isinstance(level, int) or level <= logging.INFO


def mode_summary(final: Any) -> str:
    """What the chosen mode does with this config, in one line."""
    mode = mode_of(final)
    rollout = final.actor_rollout_ref.rollout
    correction = final.algorithm.get("rollout_correction") or {}
    if correction.get("rollout_is"):
        corrected = (
            f"stale tokens weighed by {correction.rollout_is}-level importance ratios capped at "
            f"{correction.rollout_is_threshold} (algorithm.rollout_correction)"
        )
    else:
        corrected = "no importance correction of stale tokens (algorithm.rollout_correction.rollout_is: token adds it)"
    if mode == "sync":
        return "sync: each step samples its groups with the current weights, then trains (on-policy)"
    sampler = final.trainer.v1.sampler
    bound = (
        "no staleness bound (max_off_policy_threshold: null)"
        if sampler.max_off_policy_threshold is None
        else f"groups older than {sampler.max_off_policy_threshold} steps "
        + ("dropped and replaced" if sampler.max_off_policy_strategy == "drop" else "waited for")
        + " (trainer.v1.sampler.max_off_policy_threshold)"
    )
    if mode == "colocate_async":
        where = "rollout on the trainer's slots samples the next step's groups while the actor trains"
    else:
        hybrid = (
            " (and the trainer's until training starts)"
            if final.actor_rollout_ref.get("hybrid_engine", True)
            else ""
        )
        where = (
            f"rollout on {rollout.nnodes} node(s) x {rollout.n_gpus_per_node} slot(s) of its own{hybrid}, "
            "weights pushed every "
            f"{parameter_sync_step(final)} local update(s) through checkpoint engine "
            f"{rollout.checkpoint_engine.backend}"
        )
    return f"{mode}: {where}; {bound}; {corrected}"
