"""Checks of a composed verl config that verl itself makes only on a GPU node, mid-run."""

from __future__ import annotations

import logging
from typing import Any

from aworld_train.core.errors import ConfigError
from aworld_train.engines.native import BLANK, get
from aworld_train.inputs.run import RenderedRun, RunInputs

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


# vLLM's largest adapter rank (vllm.config.lora.MaxLoRARanks), which verl 0.9.1 falls back to as
# well where it cannot read vLLM's (workers/rollout/vllm_rollout/utils.py, get_vllm_max_lora_rank)
VLLM_MAX_LORA_RANK = 512
MODEL = "actor_rollout_ref.model"


def lora_rank(composed: Any) -> int:
    """The adapter rank verl's FSDP actor trains (0: no adapter)."""
    return int(composed.actor_rollout_ref.model.get("lora_rank") or 0)


def lora_unmerged(composed: Any) -> bool:
    """Whether the actor sends an adapter to the rollout, rather than weights with it merged in."""
    return lora_rank(composed) > 0 and not composed.actor_rollout_ref.model.lora.get("merge", False)


def refuse_unservable_lora(composed: Any, rollout: str) -> None:
    """LoRA settings of the composed verl config that verl 0.9.1 would not carry out as written,
    each refused with its fix before anything starts. `rollout` is the rollout's name
    (`aworld_cpu` loads the adapter into its model; vLLM gets it as a LoRA request)."""
    model = composed.actor_rollout_ref.model
    actor = composed.actor_rollout_ref.actor
    rollout_section = composed.actor_rollout_ref.rollout
    megatron_rank = int(model.lora.get("rank") or 0)
    if actor.strategy in ("fsdp", "fsdp2") and megatron_rank > 0 and lora_rank(composed) == 0:
        raise ConfigError(
            f"verl.{MODEL}.lora.rank={megatron_rank} is read by verl's Megatron actor only: the FSDP actor "
            f"(actor.strategy {actor.strategy}) would train every weight; set verl.{MODEL}.lora_rank: "
            f"{megatron_rank} (with lora_alpha and target_modules beside it)"
        )
    if not lora_unmerged(composed):
        return
    rank = lora_rank(composed)
    if composed.trainer.v1.trainer_mode == "separate_async":
        raise ConfigError(
            f"verl.{MODEL}.lora_rank={rank} with an adapter that is not merged, in trainer_mode "
            "separate_async: verl 0.9.1 pushes the standalone rollout's weights through a checkpoint engine, "
            "and that path sends the base weights without the adapter (workers/engine_workers.py:764 drops "
            "the peft_config), so the rollout would sample from the base alone; set "
            f"verl.{MODEL}.lora.merge: true (the adapter merged into the weights sent), or trainer_mode "
            "sync or colocate_async"
        )
    if rollout_section.get("layered_summon") and "dummy" in str(rollout_section.load_format):
        raise ConfigError(
            "verl.actor_rollout_ref.rollout.layered_summon=true with load_format "
            f"{rollout_section.load_format!r} and a LoRA adapter: verl 0.9.1 then sends the base weights "
            "once, which layered_summon cannot gather (utils/fsdp_utils.py, collect_lora_params raises at "
            "the first update); set verl.actor_rollout_ref.rollout.load_format: safetensors (the rollout "
            "loads the base from the model path) or layered_summon: false"
        )
    if rollout == "vllm" and rank > VLLM_MAX_LORA_RANK:
        raise ConfigError(
            f"verl.{MODEL}.lora_rank={rank}: vLLM serves adapters of rank up to {VLLM_MAX_LORA_RANK} "
            f"(verl sets its max_lora_rank from lora_rank); lower lora_rank, or set verl.{MODEL}.lora.merge: "
            "true (merged weights need no adapter support)"
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
    from aworld_train.rollout.samples.codec import chat_prompt

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


def package_checks(final: Any) -> list:
    """verl and what its V1 trainer and our loop import, at the versions this adapter was written for."""
    import importlib.util
    from importlib.metadata import PackageNotFoundError, version

    from aworld_train.prerun.checks import Check

    def installed(dist: str) -> str | None:
        try:
            return version(dist)
        except PackageNotFoundError:
            return None

    checks = []
    found = installed("verl")
    checks.append(
        Check(
            "package verl", found == "0.9.1", f"verl {found or 'is not installed'}; pip install -e '.[verl]'"
        )
        if found != "0.9.1"
        else Check("package verl", True, "0.9.1")
    )
    modules = {
        "transfer_queue": "TransferQueue==0.1.11",
        "ray": "ray",
        "cachetools": "cachetools",
        "fastapi": "fastapi",
    }
    if final.actor_rollout_ref.rollout.name == "vllm":
        modules["vllm"] = "'verl[vllm]==0.9.1' (on the GPU machine)"
    for module, install in modules.items():
        ok = importlib.util.find_spec(module) is not None
        checks.append(Check(f"module {module}", ok, "" if ok else f"not installed: pip install {install}"))
    checks.append(trl_beside_verl())
    attention = final.actor_rollout_ref.model.override_config.get("attn_implementation", "flash_attention_2")
    ok = attention != "flash_attention_2" or importlib.util.find_spec("flash_attn") is not None
    checks.append(
        Check(
            "attention implementation",
            ok,
            attention
            if ok
            else "flash_attention_2 needs flash-attn: pip install flash-attn, or set "
            "verl.actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        )
    )
    return checks


def trl_beside_verl():
    """verl 0.9.1's actor imports `AutoModelForCausalLMWithValueHead` from TRL whenever TRL can be
    imported (verl/models/transformers/monkey_patch.py); TRL 1.x no longer has it, so with such a
    TRL in the environment every actor fails at start. The same imports, tried here."""
    import importlib.util
    import warnings

    from aworld_train.prerun.checks import Check

    name = "TRL beside verl"
    if importlib.util.find_spec("trl") is None:
        return Check(name, True, "TRL not installed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TRL warns on any import from trl.experimental
        try:
            from trl.experimental.ppo import AutoModelForCausalLMWithValueHead  # noqa: F401
        except ImportError:
            try:
                from trl import AutoModelForCausalLMWithValueHead  # noqa: F401
            except ImportError:
                from importlib.metadata import PackageNotFoundError, version

                try:
                    found = f"TRL {version('trl')}"
                except PackageNotFoundError:
                    found = "the installed TRL"
                return Check(
                    name,
                    False,
                    f"{found} has no AutoModelForCausalLMWithValueHead, which verl 0.9.1's actor imports "
                    "whenever TRL is installed, so its start would fail: `pip uninstall trl` in this "
                    "environment (the benchmarks' peers live in their own: `make bench-env`)",
                )
    return Check(name, True, "TRL provides AutoModelForCausalLMWithValueHead")


def preflight(inputs: RunInputs, run: RenderedRun) -> list:
    """The rendered verl run's checks: what its trainer mode does, packages, attention, first prompts."""
    from aworld_train.engines.verl.modes import mode_summary
    from aworld_train.prerun.checks import Check
    from aworld_train.rollout.policies.models import load_tokenizer

    checks = [
        Check("verl config renders", True, str(run.config_path)),
        Check("trainer mode", True, mode_summary(run.final)),
        *package_checks(run.final),
    ]
    over = warn_long_prompts(run.final, inputs, load_tokenizer(run.final.actor_rollout_ref.model.path))
    limit = run.final.data.max_prompt_length
    checks.append(
        Check(
            "first prompts fit",
            over == 0,
            f"all within data.max_prompt_length={limit}"
            if not over
            else f"{over} training prompts exceed data.max_prompt_length={limit}: raise it (rollout.max_prompt_tokens)",
        )
    )
    ray_init = run.final.ray_kwargs.ray_init
    if ray_init.get("address"):  # a cluster: each node is checked before the launch
        from aworld_train.prerun.cluster import cluster_checks

        checks += cluster_checks(
            ray_init.address,
            inputs.run_dir.resolve(),
            inputs.spec.to_yaml(),
            inputs.spec.mcp_config,
            env_servers=[server.name for server in inputs.config.env],
            env=dict(ray_init.runtime_env.get("env_vars") or {}),
        )
    return checks
