"""`gigpo` and `discounted` in verl's advantage-estimator registry, and what gets them their batch.

Our replay buffer (`engines/verl/episodes.py`, every run's `custom_sampler`) imports this module
in verl's trainer process, where advantages are computed. Importing it:

- registers the estimators `gigpo` and `discounted` (`core_algos.register_adv_est`), which verl's
  `compute_advantage` calls over the whole batch (the v1 trainer hands every estimator but GRPO
  the batch whole: `v1/utils.compute_advantage_for_multi_trajectories`);
- wraps the v1 trainer's `_compute_advantage`: it reads from TransferQueue only the fields verl's
  own estimators need (uid, scores, masks), and verl passes a registered estimator only
  `token_level_rewards, response_mask, config, index`. The wrapper reads the batch's
  `extra_fields` (where our agent loop put each row's turns) and binds them for the estimator.

Each call's units, their rewards and advantages are appended to the JSONL file named in
`AWORLD_TRAIN_VERL_CREDIT` (the run folder's `turn_advantages.jsonl`), with the trainer's step.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from verl.trainer.ppo import core_algos

from aworld_train.engines.verl.turn_credit import CREDIT_ENV, TURNS_FIELD, batch_advantages

ESTIMATORS = ("gigpo", "discounted")

# the rows of the batch being computed (`TURNS_FIELD` of each output's extra_fields, None where absent)
_ROWS: contextvars.ContextVar[Sequence[dict[str, Any] | None] | None] = contextvars.ContextVar(
    "aworld_turn_rows", default=None
)
_STEP: contextvars.ContextVar[int | None] = contextvars.ContextVar("aworld_turn_step", default=None)


@contextlib.contextmanager
def batch_turns(rows: Sequence[dict[str, Any] | None], step: int | None = None) -> Iterator[None]:
    """The batch's turn rows (in the batch's row order) for the estimators called inside."""
    tokens = _ROWS.set(list(rows)), _STEP.set(step)
    try:
        yield
    finally:
        _ROWS.reset(tokens[0])
        _STEP.reset(tokens[1])


def credit_settings() -> dict[str, Any]:
    return json.loads(os.environ.get(CREDIT_ENV) or "{}")


def _setting(config: Any, key: str, default: Any) -> Any:
    """verl's algorithm config (a DictConfig, or its AlgoConfig dataclass) at `key`."""
    value = getattr(config, key, None) if config is not None else None
    return default if value is None else value


def _estimate(name: str, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, config, index):
    rows = _ROWS.get()
    if rows is None or len(rows) != response_mask.shape[0]:
        raise RuntimeError(
            f"algorithm.adv_estimator={name}: the batch's turns did not reach the estimator "
            f"({'none' if rows is None else len(rows)} rows for {response_mask.shape[0]}); it runs in "
            "verl's v1 trainer with aworld_train.engines.verl.advantages imported (VERL_USE_EXTERNAL_MODULES)"
        )
    settings = credit_settings()
    values, record = batch_advantages(
        name,  # type: ignore[arg-type]
        rows,
        list(index),
        response_mask.shape[1],
        gamma=float(_setting(config, "gamma", 1.0)),
        step_weight=float(settings.get("step_weight", 1.0)),
        norm_by_std=bool(_setting(config, "norm_adv_by_std_in_grpo", True)),
    )
    advantages = torch.tensor(values, dtype=torch.float32, device=response_mask.device) * response_mask
    if settings.get("log"):
        line = {"step": _STEP.get(), "estimator": name, "units": record}
        with Path(settings["log"]).open("a") as out:
            out.write(json.dumps(line) + "\n")
    return advantages, advantages


@core_algos.register_adv_est("gigpo")
def gigpo_advantage(token_level_rewards, response_mask, config=None, index=None, **_: Any):
    """GiGPO over the batch's turns (rollout/samples/credit.py); [B, T], 0 where the mask is 0."""
    return _estimate("gigpo", token_level_rewards, response_mask, config, index)


@core_algos.register_adv_est("discounted")
def discounted_advantage(token_level_rewards, response_mask, config=None, index=None, **_: Any):
    """Each turn's return-to-go against its group's (rollout/samples/credit.py)."""
    return _estimate("discounted", token_level_rewards, response_mask, config, index)


def _extra_fields_rows(values: Any) -> list[dict[str, Any] | None]:
    """Each row's `TURNS_FIELD` from TransferQueue's `extra_fields` (a stack of NonTensorData)."""
    items = values.tolist() if hasattr(values, "tolist") else list(values)
    rows = []
    for item in items:
        fields = getattr(item, "data", item)
        rows.append(fields.get(TURNS_FIELD) if isinstance(fields, dict) else None)
    return rows


def _with_turns(original):
    @functools.wraps(original)
    def _compute_advantage(self, batch, metrics: dict):
        if str(self.config.algorithm.adv_estimator) not in ESTIMATORS:
            return original(self, batch, metrics)
        import transfer_queue as tq

        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"]
        )
        with batch_turns(_extra_fields_rows(data["extra_fields"]), getattr(self, "global_steps", None)):
            return original(self, batch, metrics)

    _compute_advantage.aworld_turns = True  # type: ignore[attr-defined]
    return _compute_advantage


def patch_trainer() -> None:
    """Wrap `PPOTrainer._compute_advantage` of verl's v1 trainer, once."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from aworld_train.core.patch_table import ENGINE_PATCHES
    from aworld_train.core.upstream import guard

    if getattr(PPOTrainer._compute_advantage, "aworld_turns", False):
        return
    guard(ENGINE_PATCHES, "verl", "aworld-train's advantages per turn")
    PPOTrainer._compute_advantage = _with_turns(PPOTrainer._compute_advantage)


patch_trainer()
