"""The facade's settings in verl's own keys: one spelling per setting, whatever engine runs it.

Each is a `Derived` value: it fills verl's key where the user's `verl:` section leaves it blank, a
native key the user set wins where it agrees, and one that contradicts a facade key the user set
is refused with both names (`engines/native.py: fill`). docs/BACKENDS.md has the table; what
verl cannot honour, `check` says (`facade_limits`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aworld_train.core.errors import ConfigError
from aworld_train.engines.native import Derived, get, lora_dropout_limit

if TYPE_CHECKING:
    from aworld_train.inputs.config import TrainConfig

MODE = "trainer.v1.trainer_mode"
ASYNC_MODES = ("colocate_async", "separate_async")
MINI_BATCH = "actor_rollout_ref.actor.ppo_mini_batch_size"


def facade_values(cfg: TrainConfig) -> list[Derived]:
    algo, rollout, trainer = cfg.algorithm, cfg.rollout, cfg.trainer
    values = [
        Derived("actor_rollout_ref.rollout.top_p", rollout.top_p, "rollout.top_p"),
        Derived("actor_rollout_ref.rollout.top_k", rollout.top_k or -1, "rollout.top_k"),
        Derived("actor_rollout_ref.actor.optim.weight_decay", algo.weight_decay, "algorithm.weight_decay"),
        Derived("actor_rollout_ref.actor.optim.lr_warmup_steps", algo.warmup_steps, "algorithm.warmup_steps"),
        Derived("actor_rollout_ref.actor.grad_clip", algo.grad_clip, "algorithm.grad_clip"),
        Derived(MINI_BATCH, mini_batch(cfg), "algorithm.mini_batches"),
        Derived(
            "actor_rollout_ref.model.enable_gradient_checkpointing",
            algo.gradient_checkpointing,
            "algorithm.gradient_checkpointing",
        ),
        Derived("trainer.max_actor_ckpt_to_keep", trainer.save_total_limit, "trainer.save_total_limit"),
        # an advantage per turn: our estimators in verl's registry (engines/verl/advantages.py), whose
        # returns-to-go discount by verl's own gamma
        Derived("algorithm.adv_estimator", algo.advantage, "algorithm.advantage"),
        Derived("algorithm.gamma", algo.gamma, "algorithm.gamma"),
        # a step samples with the weights it trains (sync), or the next step's groups are sampled
        # while the actor trains, no group older than max_staleness steps (verl's colocated async)
        Derived(MODE, "colocate_async" if algo.max_staleness else "sync", "algorithm.max_staleness"),
    ]
    if algo.max_staleness:
        values += [
            Derived(
                "trainer.v1.sampler.max_off_policy_threshold", algo.max_staleness, "algorithm.max_staleness"
            ),
            Derived("trainer.v1.sampler.max_off_policy_strategy", "drop"),
            # stale tokens weighed by the actor's probability over the rollout's, capped: the
            # truncated importance weight of the local backend's decoupled loss
            Derived("algorithm.rollout_correction.rollout_is", "token"),
            Derived(
                "algorithm.rollout_correction.rollout_is_threshold",
                algo.importance_cap,
                "algorithm.importance_cap",
            ),
        ]
    if algo.lora is not None:
        values += [
            Derived("actor_rollout_ref.model.lora_rank", algo.lora.rank, "algorithm.lora"),
            Derived("actor_rollout_ref.model.lora_alpha", algo.lora.alpha, "algorithm.lora"),
            Derived("actor_rollout_ref.model.target_modules", algo.lora.target_modules, "algorithm.lora"),
        ]
    return values


def mini_batch(cfg: TrainConfig) -> int:
    """verl's mini-batch in prompts: the batch split into `algorithm.mini_batches` optimizer steps."""
    batch, parts = cfg.data.batch_size, cfg.algorithm.mini_batches
    if batch % parts:
        raise ConfigError(
            f"algorithm.mini_batches={parts} does not divide data.batch_size={batch}: verl splits a step's "
            "prompts into that many equal mini-batches; choose a divisor of the batch size"
        )
    return batch // parts


def same(given: Any, derived: Any, key: str) -> bool | None:
    """Where a native value agrees with a facade key otherwise than by equality; None: by equality.
    Either asynchronous mode honours `algorithm.max_staleness` > 0."""
    if key == MODE and derived in ASYNC_MODES:
        return given in ASYNC_MODES
    return None


def facade_limits(cfg: TrainConfig) -> list[str]:
    """The facade settings the user set that verl 0.9.1 cannot honour, each with why."""
    return lora_dropout_limit(cfg, "verl's FSDP actor (actor_rollout_ref.model has no dropout key)") + (
        turn_credit_limits(cfg)
    )


def turn_credit_limits(cfg: TrainConfig) -> list[str]:
    """Our estimators need the facade's key (the render registers them in verl's processes only
    for it), and they read each turn's reward from the rows, not verl's token_level_rewards."""
    native = get(cfg.verl, "algorithm.adv_estimator")
    if native in ("gigpo", "discounted") and native != cfg.algorithm.advantage:
        return [
            f"verl.algorithm.adv_estimator={native}: aworld-train's estimator, registered in verl's processes "
            f"for algorithm.advantage: {native}; set that instead"
        ]
    if cfg.algorithm.advantage != "grpo" and get(cfg.verl, "algorithm.filter_groups.enable"):
        return [
            f"verl.algorithm.filter_groups with algorithm.advantage: {cfg.algorithm.advantage}: the "
            "estimator is registered by aworld-train's replay buffer, which verl's DAPO filtering replaces"
        ]
    if cfg.algorithm.advantage != "grpo" and get(cfg.verl, "algorithm.use_kl_in_reward"):
        return [
            f"verl.algorithm.use_kl_in_reward with algorithm.advantage: {cfg.algorithm.advantage}: the "
            "estimator takes each turn's reward from the episode, not verl's KL-penalised token rewards; "
            "use algorithm.kl_coef (a KL loss) instead"
        ]
    return []
