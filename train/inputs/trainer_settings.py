"""The `trainer:` section: how long a run trains, when it evaluates and saves, where its folder is,
its seed, and the Ray cluster verl joins."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


def ray_address_problem(value: str) -> str | None:
    """None for an address `ray.init` joins (host:port, ray://host:port, auto); else why not."""
    if value == "auto":
        return None
    rest = value.removeprefix("ray://")
    host, _, port = rest.rpartition(":")
    if host.strip("[]") and port.isdigit() and 0 < int(port) < 65536 and "/" not in rest:
        return None
    return (
        f"{value!r} is not a Ray address: give the head node's host:port (e.g. 10.0.0.1:6379), "
        "ray://host:10001 for Ray Client, or auto"
    )


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class TrainerConfig(_Section):
    steps: int = Field(
        20,
        ge=1,
        description="GRPO steps (one batch sampled and learned each); a run of none would load the model and "
        "train nothing; 20: a short run (verl: trainer.total_training_steps; AReaL: total_train_steps)",
    )
    eval_every: int = Field(
        5,
        ge=0,
        description="evaluate on data.test every N steps; 0 never (eval_before and eval_after still run); "
        "5: a few points over the default steps (verl: trainer.test_freq; AReaL: evaluator.freq_steps)",
    )
    save_every: int = Field(
        10,
        ge=0,
        description="save a checkpoint every N steps (the local backend saves the last step's too); 0: no "
        "periodic checkpoint (verl: trainer.save_freq; AReaL: saver.freq_steps)",
    )
    save_total_limit: int | None = Field(
        1,
        ge=1,
        description="checkpoints a run keeps (Hugging Face's save_total_limit): the last N, and the one "
        "with the best held-out accuracy where an evaluation ran at a checkpoint's step; older ones are "
        "removed after each save, and --resume continues from the last. null keeps every checkpoint "
        "(verl: trainer.max_actor_ckpt_to_keep)",
    )
    run_dir: str = Field(
        "runs/default",
        description="the run folder: the final config, metrics, token files, trajectories, checkpoints; "
        "under runs/, which git ignores",
    )
    ray_address: str | None = Field(
        None,
        description="verl: join the Ray cluster at host:port (RAY_ADDRESS when unset); none: verl starts its own",
    )

    @field_validator("ray_address")
    @classmethod
    def _an_address(cls, value: str | None) -> str | None:
        problem = ray_address_problem(value) if value else None
        if problem is not None:
            raise ValueError(problem)
        return value

    eval_before: bool = Field(
        True,
        description="evaluate on data.test before the first step, the baseline a run is judged against "
        "(verl: trainer.val_before_train; AReaL: evaluator.eval_before_train)",
    )
    eval_after: bool = Field(
        True,
        description="evaluate on data.test after the last step: the figure a run ends on (verl: "
        "trainer.test_freq, which validates at the last step)",
    )
    eval_temperature: float | None = Field(
        None,
        ge=0,
        description="sampling temperature of every held-out evaluation, on every backend (verl: "
        "rollout.val_kwargs; AReaL: the evaluator's); 0 is greedy; unset: rollout.temperature",
    )
    eval_k: int = Field(
        1,
        ge=1,
        description="samples per held-out task; pass@k and mean@k come from them; 1: plain accuracy, the "
        "cheapest (verl: actor_rollout_ref.rollout.val_kwargs.n)",
    )
    eval_seeds: list[int] | None = Field(
        None,
        min_length=1,
        description="one held-out evaluation per seed, each sample drawing from its own seed so that "
        "`aworld-train eval` reproduces the figure; unset: [trainer.seed]",
    )
    eval_max_turns: int | None = Field(
        None,
        ge=1,
        description="assistant turns per user turn in held-out episodes; unset: rollout.max_assistant_turns",
    )
    log_trajectories: int = Field(
        4, ge=0, description="sampled trajectories written per step; a few to read, not the whole batch"
    )
    stop_after_failed_steps: int = Field(
        3,
        ge=0,
        description="stop after this many steps in a row where every episode failed for one cause; 0 never; "
        "3: a passing fault (a server's restart) is outlived, a broken setup stops early",
    )
    seed: int = Field(
        0,
        description="seeds what a run draws: each step's tasks, each sample's tokens, torch; fixed, so that "
        "one config run twice repeats (AReaL: seed)",
    )
