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


def require_merged_lora_on_cpu(cfg: Any) -> None:
    """Our CPU rollout loads full weights only: verl must merge a LoRA adapter before it sends them
    (model.lora.merge); an adapter sent on its own would be refused mid-run, after the first update."""
    from aworld_train.engines.verl.cpu_run import is_cpu_run

    model = "actor_rollout_ref.model"
    rank = get(cfg.verl, f"{model}.lora_rank") or get(cfg.verl, f"{model}.lora.rank")
    if rank in BLANK or not int(rank) or not is_cpu_run(cfg):
        return
    if get(cfg.verl, f"{model}.lora.merge") is not True:
        raise ConfigError(
            f"verl.{model}.lora_rank={rank} on a CPU run: the CPU rollout loads merged weights only, not a "
            f"LoRA adapter; set verl.{model}.lora.merge: true (verl then merges the adapter into the weights "
            "it sends after each update)"
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
