"""Held-out evaluation, one meaning on every engine.

`trainer.eval_temperature`, `eval_k`, `eval_seeds` and `eval_max_turns` say how a run measures its
held-out accuracy (before, during and after training): the local backend samples with them, verl's
validation (`val_kwargs`) and AReaL's evaluator are rendered from them, and `aworld-train eval` takes
them as its defaults, so that it reproduces a run's own figure on that run's checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

from aworld_train.inputs.config import TrainConfig
from aworld_train.rollout.episodes.settings import RolloutSettings


@dataclass(frozen=True)
class HeldOut:
    """How held-out tasks are sampled: at `temperature`, `k` samples per task under each of `seeds`
    (sample j of task t under seed s draws from its own seed, whatever else runs beside it), at most
    `max_turns` LLM calls per user turn."""

    temperature: float
    k: int
    seeds: tuple[int, ...]
    max_turns: int

    def rollout(self, settings: RolloutSettings) -> RolloutSettings:
        """The rollout settings an evaluation's episodes obey."""
        if (settings.temperature, settings.max_assistant_turns) == (self.temperature, self.max_turns):
            return settings
        return settings.model_copy(
            update={"temperature": self.temperature, "max_assistant_turns": self.max_turns}
        )

    def describe(self) -> str:
        seeds = " ".join(map(str, self.seeds))
        return f"k={self.k}, temperature {self.temperature:g}, {self.max_turns} turns, seeds {seeds}"


def held_out(cfg: TrainConfig) -> HeldOut:
    """A run's held-out settings (`trainer.eval_*`, falling back to the rollout's and the run's seed)."""
    trainer, rollout = cfg.trainer, cfg.rollout
    return HeldOut(
        temperature=rollout.temperature if trainer.eval_temperature is None else trainer.eval_temperature,
        k=trainer.eval_k,
        seeds=tuple(trainer.eval_seeds if trainer.eval_seeds is not None else [trainer.seed]),
        max_turns=trainer.eval_max_turns or rollout.max_assistant_turns,
    )


def command_held_out(cfg: TrainConfig) -> HeldOut:
    """`aworld-train eval`'s settings: what `eval:` (or its flags) gives, else the run's own."""
    run, ev = held_out(cfg), cfg.eval
    return HeldOut(
        temperature=run.temperature if ev.temperature is None else ev.temperature,
        k=run.k if ev.k is None else ev.k,
        seeds=run.seeds if ev.seeds is None else tuple(ev.seeds),
        max_turns=run.max_turns,
    )
