"""The `data:` and `reward:` sections: the tasks a run learns from and is measured on, and the
function that scores their episodes."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class DataConfig(_Section):
    """data: the train and held-out tasks, and the batch (read by inputs/dataset.py)."""

    train: str | None = Field(
        None,
        description="the training tasks: a .jsonl, .json or .parquet file of rows (or AgentTrainer's "
        "train_dataset); unset: a run has nothing to train on and is refused",
    )
    test: str | None = Field(
        None,
        description="held-out tasks (same formats) for the run's evaluations and `aworld-train eval`; "
        "unset: no held-out figure",
    )
    batch_size: int = Field(
        8,
        ge=1,
        description="tasks per training step, each sampled algorithm.group_size times; 8 x 4 episodes keep a "
        "CPU step short (verl: data.train_batch_size; AReaL: train_dataset.batch_size)",
    )
    prompt_key: str = Field(
        "prompt",
        description="the column of a row's prompt: a string, a list of user turns, or chat messages; "
        "prompt, verl's column",
    )
    answer_key: str = Field(
        "ground_truth",
        description="the column of the ground truth the reward gets; ground_truth, verl's (whose "
        "reward_model.ground_truth is read too)",
    )
    max_test: int | None = Field(
        None, ge=1, description="evaluate on at most this many test rows (the first); unset: every row"
    )


class RewardConfig(_Section):
    """reward: the function that scores each episode (loaded by inputs/reward.py)."""

    fn: str | None = Field(
        None,
        description="the function that scores an episode: 'module:function' or 'path/to/file.py:function'; "
        "unset: AgentTrainer's reward_func, or a native verl config's custom_reward_function",
    )
    kwargs: dict[str, Any] = Field(
        default_factory=dict, description="keyword arguments the reward function gets on every call"
    )
