"""The facade's settings in AReaL's own keys: one spelling per setting, whatever engine runs it.

Each is a `Derived` value with the same rules as verl's (`engines/verl/facade.py`): it fills the
blank, a native key the user set wins where it agrees, a contradiction with a facade key the user
set is refused with both names. docs/BACKENDS.md has the table; what AReaL cannot honour, `check`
says (`facade_limits`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aworld_train.engines.native import Derived, lora_dropout_limit

if TYPE_CHECKING:
    from aworld_train.inputs.config import TrainConfig


def facade_values(cfg: TrainConfig) -> list[Derived]:
    algo, rollout = cfg.algorithm, cfg.rollout
    values = [
        Derived("gconfig.top_k", rollout.top_k, "rollout.top_k"),
        # a request may run this many weight versions behind the actor (0: on-policy)
        Derived("rollout.max_head_offpolicyness", algo.max_staleness, "algorithm.max_staleness"),
    ]
    if algo.max_staleness:
        values += [
            # the decoupled loss, its behaviour importance weight clamped at the cap: the local
            # backend's truncated importance weight of stale tokens
            Derived("actor.use_decoupled_loss", True, "algorithm.max_staleness"),
            Derived("actor.rejection_sampling.level", "token"),
            Derived("actor.rejection_sampling.action", "clamp"),
            Derived("actor.rejection_sampling.metric", "ratio"),
            Derived("actor.rejection_sampling.upper", algo.importance_cap, "algorithm.importance_cap"),
            # no lower clamp in effect; AReaL 1.0.4's RPC sends an unset bound as 0.0, which its
            # own check then refuses ("lower must be positive"), so a bound far below any weight
            Derived("actor.rejection_sampling.lower", 1e-9),
        ]
    if algo.lora is not None:
        modules = algo.lora.target_modules
        values += [
            Derived("actor.use_lora", True, "algorithm.lora"),
            Derived("actor.lora_rank", algo.lora.rank, "algorithm.lora"),
            Derived("actor.lora_alpha", int(algo.lora.alpha), "algorithm.lora"),
            Derived(
                "actor.target_modules", [modules] if isinstance(modules, str) else modules, "algorithm.lora"
            ),
        ]
    return values


def facade_limits(cfg: TrainConfig, explicit: frozenset[str]) -> list[str]:
    """The facade settings the user set that AReaL 1.0.4 cannot honour, each with why."""
    limits = lora_dropout_limit(cfg, "AReaL's actor (actor has no dropout key)")
    lora = cfg.algorithm.lora
    if cfg.algorithm.max_staleness and cfg.algorithm.importance_cap <= 1.0:
        limits.append(
            f"algorithm.importance_cap={cfg.algorithm.importance_cap:g}: AReaL clamps importance weights "
            "above 1 only (actor.rejection_sampling.upper must be over 1); raise it"
        )
    if lora is not None and lora.alpha != int(lora.alpha):
        limits.append(f"algorithm.lora.alpha={lora.alpha:g}: AReaL takes a whole number (actor.lora_alpha)")
    if "trainer.save_total_limit" in explicit and cfg.trainer.save_total_limit is not None:
        limits.append(
            f"trainer.save_total_limit={cfg.trainer.save_total_limit}: AReaL's saver keeps every checkpoint "
            "it writes (saver has no limit); remove it, or lower trainer.save_every"
        )
    return limits
