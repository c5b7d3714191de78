"""The `sft:` section: what `aworld-train sft` fine-tunes on and how (facade/sft.py); the local
backend's trainer is engines/local/sft.py, verl's is rendered by engines/verl/sft.py, whose keys
the descriptions name."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class SFTConfig(BaseModel):
    """`aworld-train sft`: supervised fine-tuning on multi-turn trajectories, loss on assistant tokens."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    data: list[str] = Field(
        default_factory=list,
        description="trajectory files: AgentGym records (item_id, conversations) or `eval`'s JSONL",
    )
    format: Literal["auto", "agentgym", "trajectory"] = Field(
        "auto",
        description="how sft.data's records read: agentgym, trajectory (`eval`'s), or auto: each record by "
        "its keys, so that one list may mix both",
    )
    only_correct: bool = Field(
        True,
        description="keep only trajectories whose reward reaches min_reward (an AgentGym record without "
        "one is kept); on, since imitating a failure teaches it",
    )
    min_reward: float = Field(
        0.999, description="with only_correct: the least reward kept; 0.999 takes a reward of 1 as correct"
    )
    system: str | None = Field(None, description="system prompt put before AgentGym conversations")
    backend: Literal["local", "verl"] = Field(
        "local",
        description="what trains: local (this process, a CPU or one GPU; needs nothing more) or verl "
        "(verl's SFT trainer, its keys in sft.verl)",
    )
    epochs: int = Field(
        1,
        ge=1,
        description="passes over the kept samples; one, as few trajectories overfit fast (verl: "
        "trainer.total_epochs)",
    )
    max_steps: int | None = Field(
        None,
        ge=1,
        description="stop after this many optimizer steps; unset: every epoch runs (verl: "
        "trainer.total_training_steps)",
    )
    lr: float = Field(
        1.0e-5, gt=0, description="AdamW's learning rate; 1e-5 suits full-weight tuning (verl: optim.lr)"
    )
    batch_size: int = Field(8, ge=1, description="sequences per optimizer step (verl: data.train_batch_size)")
    micro_batch_tokens: int = Field(
        4096,
        ge=64,
        description="token budget of one forward/backward; lower it when memory runs out (verl: "
        "data.max_token_len_per_gpu, at least max_length)",
    )
    max_length: int = Field(
        2048,
        ge=16,
        description="longer sequences are left out (and counted), never cut mid-turn; 2048 tokens hold "
        "several tool-calling turns (verl: data.max_length)",
    )
    warmup_steps: int = Field(
        0, ge=0, description="optimizer steps of linear warm-up to lr; 0: none (verl: optim.lr_warmup_steps)"
    )
    weight_decay: float = Field(
        0.0, ge=0, description="AdamW's decoupled weight decay; 0.0, none (verl: optim.weight_decay)"
    )
    grad_clip: float = Field(
        1.0, gt=0, description="largest global gradient norm of a step (verl: optim.clip_grad)"
    )
    seed: int = Field(
        0, description="seeds torch and each epoch's shuffle, so a rerun repeats (verl: trainer.seed)"
    )
    run_dir: str = Field(
        "runs/sft",
        description="the SFT run folder: checkpoints, sft_summary.json, the evaluation; under runs/, which "
        "git ignores",
    )
    eval_after: bool = Field(True, description="evaluate the result on data.test right after training")
    eval_base: bool = Field(False, description="evaluate the starting model too, in the same table")
    verl: dict[str, Any] = Field(default_factory=dict, description="native keys for verl's SFT trainer")
