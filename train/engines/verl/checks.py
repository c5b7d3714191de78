"""Checks of a composed verl config that verl itself makes only on a GPU node, mid-run."""

from __future__ import annotations

import logging
from typing import Any

from aworld_train.engines.base import RunInputs
from aworld_train.engines.native import BLANK, get
from aworld_train.errors import ConfigError

log = logging.getLogger("aworld_train")

# verl splits batches by these token budgets and asserts each is at least the longest sequence
# (verl/utils/seqlen_balancing.py): a budget below prompt + response length fails on the first update.
TOKEN_BUDGETS = (
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
)


def require_v1(final: Any) -> None:
    if not final.trainer.use_v1:
        raise ConfigError(
            "verl.trainer.use_v1=false selects verl's legacy trainer, which keeps every sample of a group "
            "in its GRPO baseline, so a failed episode would count there as reward 0; aworld-train runs "
            "verl's V1 trainer (its default): remove trainer.use_v1"
        )


def fit_token_budgets(final: Any, inputs: RunInputs) -> None:
    """Raise derived budgets to the longest sequence; a budget the user set that is too small is an error."""
    from omegaconf import OmegaConf

    longest = int(final.data.max_prompt_length) + int(final.data.max_response_length)
    for key in TOKEN_BUDGETS:
        value = OmegaConf.select(final, key)
        if value is None or int(value) >= longest:
            continue
        fix = (
            f"raise it to at least {longest} (data.max_prompt_length + data.max_response_length) "
            "or shorten those lengths"
        )
        if get(inputs.config.verl, key) not in BLANK:
            raise ConfigError(f"verl.{key}={value} is below the longest sequence verl may see: {fix}")
        if inputs.explicit("algorithm.micro_batch_tokens"):
            raise ConfigError(
                f"algorithm.micro_batch_tokens={value} (verl's {key}) is below the longest sequence "
                f"verl may see: {fix}"
            )
        OmegaConf.update(final, key, longest)


def first_prompt_lengths(inputs: RunInputs, tokenizer) -> list[int]:
    """Tokens of each training task's first prompt before the tool list is added (a lower bound)."""
    from aworld_train.rollout.codec import chat_prompt

    lengths = []
    for task in inputs.train_tasks:
        messages = chat_prompt(task)
        if not task.system and inputs.spec.system_prompt:
            messages = [{"role": "system", "content": inputs.spec.system_prompt}, *messages]
        messages = [messages[0], *inputs.spec.few_shot, *messages[1:]] if inputs.spec.few_shot else messages
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        lengths.append(len(tokenizer.encode(text, add_special_tokens=False)))
    return lengths


def warn_long_prompts(final: Any, inputs: RunInputs, tokenizer) -> int:
    """Warn when first prompts cannot fit data.max_prompt_length; returns how many cannot."""
    limit = int(final.data.max_prompt_length)
    lengths = first_prompt_lengths(inputs, tokenizer)
    over = [n for n in lengths if n > limit]
    if over:
        log.warning(
            "%d of %d training prompts are longer than data.max_prompt_length=%d before the tool list is "
            "added (longest %d tokens); those episodes end as prompt_too_long: raise "
            "data.max_prompt_length (rollout.max_prompt_tokens) or shorten the prompts",
            len(over),
            len(lengths),
            limit,
            max(over),
        )
    return len(over)
