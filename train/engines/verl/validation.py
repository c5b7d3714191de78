"""verl's validation as the run's held-out evaluation (`evaluation/held_out.py`), one meaning on
every engine: the local backend and `aworld-train eval` sample the same tasks at the same
temperature, turn limit and seeds.

- The render: `actor_rollout_ref.rollout.val_kwargs` from the held-out settings (temperature,
  n = samples per task, top-p and top-k of the rollout), `val_before_train` and a validation after
  the last step (verl validates at its last step whenever `test_freq` > 0), `hf_model` in the
  actor's checkpoints so that `aworld-train eval` can load them, and `val.parquet` written once per
  eval seed, each row with its `eval_seed`.
- The agent loop: a validation row (`extra_info.split == "val"`) runs under the held-out rollout
  settings, sample j of task t under seed s drawing from `derive_seed(s, t, j)` as
  `rollout/episodes/batch.py` does for the local backend (j: verl's session index among the n
  samples of a prompt); each LLM call's own seed then goes to verl's server with the request.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from aworld_train.core.errors import ConfigError
from aworld_train.engines.native import BLANK, Derived, get
from aworld_train.engines.verl.tokens import SPLIT_FIELD
from aworld_train.evaluation.held_out import HeldOut, held_out
from aworld_train.rollout.policies.client import derive_seed

if TYPE_CHECKING:
    from aworld_train.inputs.config import TrainConfig
    from aworld_train.inputs.run import RunInputs

SEED_FIELD = "eval_seed"  # in a validation row's extra_info: the eval seed its samples draw from
VAL_KWARGS = "actor_rollout_ref.rollout.val_kwargs"
# verl's own checkpoint contents, plus the transformers folder `aworld-train eval` loads
SAVE_CONTENTS = ["model", "optimizer", "extra", "hf_model"]


def validation_derived(inputs: RunInputs) -> list[Derived]:
    """verl's validation keys from the held-out settings; a native key that contradicts a facade
    key the user set is refused naming both (`engines/native.py: fill`)."""
    cfg = inputs.config
    held, rollout, trainer = held_out(cfg), cfg.rollout, cfg.trainer
    refuse_unsampled_validation(cfg, held)
    temperature = (
        "trainer.eval_temperature" if trainer.eval_temperature is not None else "rollout.temperature"
    )
    values = [
        Derived(f"{VAL_KWARGS}.temperature", held.temperature, temperature),
        Derived(f"{VAL_KWARGS}.do_sample", held.temperature > 0, temperature),
        Derived(f"{VAL_KWARGS}.n", held.k, "trainer.eval_k"),
        Derived(f"{VAL_KWARGS}.top_p", rollout.top_p, "rollout.top_p"),
        Derived(f"{VAL_KWARGS}.top_k", rollout.top_k or -1, "rollout.top_k"),
    ]
    if held_out_tasks(inputs):
        values += [
            Derived("trainer.val_before_train", trainer.eval_before, "trainer.eval_before"),
            Derived(
                "trainer.test_freq",
                validation_freq(cfg),
                "trainer.eval_every" if trainer.eval_every else "trainer.eval_after",
            ),
        ]
    else:  # as on the local backend: no data.test, no held-out figure (verl's val.parquet is the train set)
        values += [Derived("trainer.val_before_train", False), Derived("trainer.test_freq", -1)]
    if cfg.algorithm.lora is None:  # a LoRA actor's hf_model would be the base under peft's names
        values.append(Derived("actor_rollout_ref.actor.checkpoint.save_contents", SAVE_CONTENTS))
    return values


def validation_freq(cfg: TrainConfig) -> int:
    """verl's `test_freq`: every `trainer.eval_every` steps; with 0, once after the last step where
    `trainer.eval_after` asks (verl validates at its last step whenever test_freq > 0); -1 never."""
    trainer = cfg.trainer
    if trainer.eval_every:
        return trainer.eval_every
    return trainer.steps if trainer.eval_after else -1


def held_out_tasks(inputs: RunInputs) -> bool:
    """Tasks to evaluate on: `data.test`, or the native section's own `data.val_files`."""
    native = get(inputs.config.verl, "data.val_files") if inputs.config.backend == "verl" else None
    return bool(inputs.test_tasks) or native not in BLANK


def refuse_unsampled_validation(cfg: TrainConfig, held: HeldOut) -> None:
    """verl's config check refuses sampled validation (do_sample) beside a greedy rollout."""
    if held.temperature > 0 and cfg.rollout.temperature == 0:
        raise ConfigError(
            f"trainer.eval_temperature={held.temperature:g} with rollout.temperature=0: verl samples its "
            "validation only beside a sampling rollout; set rollout.temperature above 0, or "
            "trainer.eval_temperature=0 (greedy)"
        )


def loop_held_out(cfg: TrainConfig) -> dict[str, Any]:
    """The held-out settings as the agent loop's keyword argument (agent_loop.yaml)."""
    held = held_out(cfg)
    return {**asdict(held), "seeds": list(held.seeds)}


def loop_settings(entry: dict[str, Any] | None) -> HeldOut | None:
    """`loop_held_out` back, in the agent loop."""
    return None if not entry else HeldOut(**{**entry, "seeds": tuple(entry["seeds"])})


def val_extra(seed: int) -> dict[str, Any]:
    """What a validation row's extra_info carries beside its task."""
    return {SPLIT_FIELD: "val", SEED_FIELD: seed}


def is_validation(run_kwargs: dict[str, Any]) -> bool:
    return (run_kwargs.get("extra_info") or {}).get(SPLIT_FIELD) == "val"


def episode_seed(run_kwargs: dict[str, Any], task_id: str, held: HeldOut | None) -> int | None:
    """The seed a validation sample draws from, as the local backend's sample j of the task under
    that eval seed (a row without one, from a native val file: the run's first eval seed); None for
    a training sample, which verl's server samples as it will."""
    if held is None or not is_validation(run_kwargs):
        return None
    seed = (run_kwargs.get("extra_info") or {}).get(SEED_FIELD)
    session = int(run_kwargs.get("session_id") or 0)
    return derive_seed(held.seeds[0] if seed is None else int(seed), task_id, session)
