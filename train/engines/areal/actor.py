"""AReaL's FSDP actor and trainer with the logprob mismatch (`engines/logprob_mismatch.py`): the
proof, per step, that the rollout sampled from the weights AReaL trains (with `actor.use_lora`:
that each adapter reached the inference server).

AReaL's actor recomputes every token's logprob in its training forward; the first mini-batch's,
before any optimizer step, is the current weights' recomputation. `MeasuredFSDPPPOActor` compares
it there with the logprob the rollout reported (the `logprobs` our workflow's rows carry) for the
tokens the current weights sampled (their `versions` equal the actor's version), and records the
figures in AReaL's stats tracker: `ppo_actor/update/logprob_mismatch/{avg,max}` over
`ppo_actor/update/logprob_mismatch_tokens` (TensorBoard, AReaL's stats table). The trainer's
controller prints each step's figure as a line, with the local backend's warning above
`algorithm.mismatch_tolerance`. With `actor.recompute_logprob: true` and no decoupled loss, AReaL
replaces the rollout's logprobs by its recomputation before the loss, so there is nothing to
compare: no figure.

AReaL 1.0.4 builds its actor in `PPOTrainer._create_train_engine` by class; `MeasuredPPOTrainer`
names ours there (its workers import it by module path), so it relies on AReaL's internals:
`require_areal_version` refuses another AReaL. It is also the trainer that evaluates before and after
training (`held_out.py`).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from areal.engine import FSDPPPOActor
from areal.trainer.ppo.actor import PPOActorController
from areal.utils import stats_tracker
from areal.utils.environ import is_single_controller

from aworld_train.engines.areal.held_out import HeldOutPPOTrainer
from aworld_train.engines.logprob_mismatch import (
    MAX,
    MEAN,
    TOKENS,
    mismatch_metrics,
    mismatch_warning,
    token_mismatch,
    with_warning,
)

AREAL_VERSION = "1.0.4"
# the stat and its denominator, within AReaL's `ppo_actor/update` scope
STAT, FRESH = "logprob_mismatch", "logprob_mismatch_tokens"
SCOPE = "ppo_actor/update/"


def require_areal_version() -> None:
    import areal

    if areal.__version__ != AREAL_VERSION:
        raise RuntimeError(
            f"aworld-train's AReaL trainer overrides PPOTrainer internals of AReaL {AREAL_VERSION}; this "
            f"environment has AReaL {areal.__version__}: install areal=={AREAL_VERSION} "
            "(scripts/areal/install_cpu_env.sh)"
        )


def fresh_tokens(loss_mask: torch.Tensor, versions: torch.Tensor, version: int) -> torch.Tensor:
    """The trained positions whose token the weights of `version` sampled. AReaL's loss reads
    position t as the prediction of token t + 1 (its loss mask and logprobs are shifted so), while
    the rows' versions stay at their tokens: shifted here the same way (rows packed end to end
    included: a row's last position is never trained)."""
    return loss_mask.bool() & (torch.roll(versions, shifts=-1, dims=-1) == version)


def record_mismatch(logprobs: torch.Tensor, data: dict[str, Any], version: int) -> None:
    """The mini-batch's mismatch into AReaL's stats tracker (scope: the caller's)."""
    fresh = fresh_tokens(data["loss_mask"], data["versions"], version)
    stats_tracker.denominator(**{FRESH: fresh})
    stats_tracker.stat(**{STAT: token_mismatch(logprobs, data["logprobs"], fresh)}, denominator=FRESH)


class MeasuredFSDPPPOActor(FSDPPPOActor):
    """AReaL's FSDP actor, measuring the mismatch in the first mini-batch of each update."""

    _measure_next = False

    def ppo_update(self, *args, **kwargs) -> None:
        # AReaL's recompute without decoupled loss overwrote the rollout's logprobs: nothing to compare
        replaced = self.config.recompute_logprob and not self.config.use_decoupled_loss
        self._measure_next = not replaced
        try:
            super().ppo_update(*args, **kwargs)
        finally:
            self._measure_next = False

    def train_batch(self, input_, loss_fn, loss_weight_fn):
        if self._measure_next:
            self._measure_next = False  # later mini-batches follow an optimizer step
            loss_fn = functools.partial(_measured_loss, loss_fn, self.get_version())
        return super().train_batch(input_, loss_fn, loss_weight_fn)


def _measured_loss(loss_fn, version: int, logprobs, entropy, input_data, **kwargs):
    if "versions" in input_data:
        record_mismatch(logprobs, input_data, version)
    return loss_fn(logprobs, entropy, input_data, **kwargs)


def step_metrics(stats: dict[str, float]) -> dict[str, float] | None:
    """A step's mismatch from AReaL's exported stats, under the names the local backend logs; None
    where the actor measured none."""
    if SCOPE + FRESH not in stats:
        return None
    tokens = int(stats[SCOPE + FRESH])
    return mismatch_metrics(
        stats.get(f"{SCOPE}{STAT}/avg", 0.0), stats.get(f"{SCOPE}{STAT}/max", 0.0), tokens
    )


def step_report(metrics: dict[str, float], tolerance: float | None) -> str:
    """The line a step prints: the figure, or why there is none, and the warning above tolerance."""
    if metrics[TOKENS]:
        line = (
            f"logprob mismatch {metrics[MEAN]:.4f} (max {metrics[MAX]:.4f}) over {metrics[TOKENS]:.0f} "
            "tokens the current weights sampled"
        )
    else:
        line = "logprob mismatch: none of this update's first mini-batch was sampled by the current weights"
    warning = mismatch_warning(metrics, tolerance)
    return with_warning(line, warning)


class ReportingActorController(PPOActorController):
    """AReaL's actor controller, printing each step's mismatch when the trainer exports the stats."""

    mismatch_tolerance: float | None = None

    def export_stats(self) -> dict[str, float]:
        stats = super().export_stats()
        metrics = step_metrics(stats)
        if metrics is not None:
            print(f"aworld-train: {step_report(metrics, self.mismatch_tolerance)}", flush=True)
        return stats


class MeasuredPPOTrainer(HeldOutPPOTrainer):
    """AReaL's PPOTrainer whose FSDP actor measures the logprob mismatch each step."""

    mismatch_tolerance: float | None = None

    def _create_train_engine(self, actor_config, alloc):
        if alloc.backend != "fsdp" or not is_single_controller() or actor_config._version != "v1":
            return super()._create_train_engine(actor_config, alloc)
        actor = ReportingActorController(
            train_engine=MeasuredFSDPPPOActor, config=actor_config, scheduler=self.scheduler
        )
        actor.mismatch_tolerance = self.mismatch_tolerance
        actor.create_process_group(parallel_strategy=alloc.parallel)
        return actor


def measured_trainer(settings: dict[str, Any]) -> type[MeasuredPPOTrainer]:
    """The trainer class of a run, its `settings` (main.py: trainer_settings) as class attributes:
    the mismatch warning's tolerance, the evaluations before and after training."""
    require_areal_version()
    return type("ArealTrainer", (MeasuredPPOTrainer,), dict(settings))
