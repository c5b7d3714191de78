"""The `algorithm:` section: how the policy learns from its groups, with one meaning on every
engine. Each engine's `facade.py` (and its render) writes these keys into its own; a description
names the native key where there is one (docs/BACKENDS.md, "One config on every engine")."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from aworld_train.inputs.policy_settings import LoraConfig


class AlgorithmConfig(BaseModel):
    """algorithm: GRPO's clipped token loss, its optimizer, credit per turn, LoRA, asynchronous training."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    name: Literal["grpo"] = Field(
        "grpo",
        description="the algorithm: GRPO, a sample's reward against its group's, no value model (so only "
        "the policy trains); the one every engine runs here",
    )
    group_size: int = Field(
        4,
        description="samples per task (n); GRPO compares them, so 2 or more; 4 gives a group spread at a "
        "CPU-sized cost (verl: actor_rollout_ref.rollout.n; AReaL: the workflow's group)",
    )
    lr: float = Field(
        1.0e-5,
        gt=0,
        description="AdamW's learning rate per optimizer step; 1e-5 suits full-weight tuning of a small model, "
        "a LoRA adapter wants about 2e-4 (verl: actor_rollout_ref.actor.optim.lr; AReaL: actor.optimizer.lr)",
    )
    kl_coef: float = Field(
        0.0,
        ge=0,
        description="weight of a k3 KL penalty against the starting model (with LoRA: the base, adapter off) "
        "in the loss; 0 loads no reference model, as DAPO drops it (verl: actor.use_kl_loss, "
        "actor.kl_loss_coef, low_var_kl; AReaL: actor.kl_ctl)",
    )
    clip_low: float = Field(
        0.2,
        ge=0,
        description="a token's probability ratio is clipped below at 1 - clip_low in PPO's surrogate; 0.2 is "
        "PPO's and GRPO's (verl: actor_rollout_ref.actor.clip_ratio_low; AReaL: actor.eps_clip)",
    )
    clip_high: float = Field(
        0.28,
        ge=0,
        description="... and above at 1 + clip_high; 0.28 is DAPO's clip-higher (arXiv 2503.14476): unlikely "
        "tokens may grow more, which keeps entropy from collapsing (verl: actor.clip_ratio_high; AReaL: "
        "actor.eps_clip_higher)",
    )
    norm_adv_by_std: bool = Field(
        True,
        description="divide each advantage by its group's reward std, as GRPO does; false keeps the centred "
        "reward alone (Dr. GRPO, arXiv 2503.20783), not up-weighting near-uniform groups (verl: "
        "algorithm.norm_adv_by_std_in_grpo; AReaL: the workflow's group normalisation)",
    )
    advantage: Literal["grpo", "gigpo", "discounted"] = Field(
        "grpo",
        description="grpo: the episode's return on every token; gigpo: plus a step-level advantage over "
        "turns that acted on the same state across the group (arXiv 2505.10978); discounted: each "
        "turn's discounted return-to-go against the group (docs/BACKENDS.md, Credit per turn); grpo "
        "needs no per-turn reward (verl: algorithm.adv_estimator)",
    )
    gamma: float = Field(
        1.0,
        gt=0,
        le=1,
        description="discount per turn of the returns gigpo and discounted compare; 1.0: no discount, a "
        "turn's return is all the rewards after it (verl: algorithm.gamma)",
    )
    step_advantage_weight: float = Field(
        1.0,
        ge=0,
        description="gigpo: the weight of the step-level advantage beside the episode's; 1.0 weighs them "
        "equally, as the GiGPO paper does",
    )
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean"] = Field(
        "token-mean",
        description="how token losses average: token-mean (over every trained token, so a long episode "
        "counts per token: DAPO's and verl's default) or seq-mean-token-mean (each episode's mean, then "
        "their mean) (verl: actor_rollout_ref.actor.loss_agg_mode; AReaL has no such key)",
    )
    warmup_steps: int = Field(
        0,
        ge=0,
        description="optimizer steps over which the learning rate rises linearly to lr; 0: none, RL from a "
        "tuned model needs no warm-up (verl: actor.optim.lr_warmup_steps; AReaL: "
        "actor.optimizer.warmup_steps_proportion, over trainer.steps)",
    )
    grad_clip: float = Field(
        1.0,
        gt=0,
        description="largest global gradient norm (L2) of an optimizer step: a larger one is scaled down to "
        "it; 1.0, the usual guard against one outlier batch (verl: actor.grad_clip; AReaL: "
        "actor.optimizer.gradient_clipping)",
    )
    weight_decay: float = Field(
        0.0,
        ge=0,
        description="AdamW's decoupled weight decay; 0.0: a short RL run should not pull weights to zero "
        "(verl's own default is 0.01) (verl: actor.optim.weight_decay; AReaL: actor.optimizer.weight_decay)",
    )
    micro_batch_tokens: int = Field(
        4096,
        ge=64,
        description="token budget of one forward/backward (a micro-batch); lower it when memory runs out, "
        "the optimizer step stays the same (verl: actor.ppo_max_token_len_per_gpu; AReaL: "
        "actor.mb_spec.max_tokens_per_mb)",
    )
    mini_batches: int = Field(
        1,
        ge=1,
        description="optimizer steps per rollout batch (>1 makes clipping matter); 1: one update on exactly "
        "the sampling weights (verl: ppo_mini_batch_size = data.batch_size / this; AReaL: "
        "actor.ppo_n_minibatches)",
    )
    gradient_checkpointing: bool = Field(
        False,
        description="recompute activations in the backward pass instead of keeping them: less memory, "
        "about a third more compute; off for small models (verl: "
        "actor_rollout_ref.model.enable_gradient_checkpointing; AReaL: actor.gradient_checkpointing)",
    )
    max_staleness: int = Field(
        0,
        ge=0,
        description="0 samples a step, then trains it (synchronous); N > 0 keeps episodes running while the "
        "learner trains and trains a group only if its oldest token is at most N weight versions behind "
        "(verl: trainer.v1.trainer_mode colocate_async and sampler.max_off_policy_threshold; AReaL: "
        "rollout.max_head_offpolicyness)",
    )
    importance_cap: float = Field(
        2.0,
        ge=1.0,
        description="the largest weight a token sampled by older weights gets in the loss (truncated "
        "importance sampling of the proximal over the behaviour policy; verl: "
        "algorithm.rollout_correction.rollout_is_threshold; AReaL: actor.rejection_sampling.upper)",
    )
    lora: LoraConfig | None = Field(
        None,
        description="train a LoRA adapter only; unset: every weight trains (verl: "
        "actor_rollout_ref.model.lora_rank, lora_alpha, target_modules; AReaL: actor.use_lora, lora_rank, "
        "lora_alpha, target_modules)",
    )
    mismatch_tolerance: float = Field(
        0.1,
        gt=0,
        description="warn when the rollout's logprobs and the learner's recomputation of them differ "
        "by more than this (mean absolute, per token) before an update; bf16 rounding alone gives "
        "up to about 0.04, float32 under 1e-4. On verl: its training/rollout_probs_diff_mean (the "
        "same tokens' probabilities)",
    )

    @field_validator("group_size")
    @classmethod
    def _a_group_to_compare(cls, value: int) -> int:
        if value < 2:
            raise ValueError(
                f"{value}: GRPO's advantage is a sample's reward against its group's mean, so a group of "
                "one gives every advantage 0 and nothing is learned; use 2 or more"
            )
        return value
