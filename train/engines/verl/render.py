"""backend: verl: render the run folder, then launch `python -m verl.trainer.main_ppo`.

The final config is verl's own defaults, plus the user's native `verl:` keys (verl_config.py),
plus values derived from the common config and the trainer's inputs. The rules:
a value the user gave wins; an absent, empty or `auto` value is filled; a user
value that contradicts the common section is an error. Nothing is left at
verl's example defaults (gsm8k paths, its reward) without the user saying so.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import yaml

from aworld_train.engines.native import (
    Derived,
    fill,
    module_file,
)
from aworld_train.engines.node_servers import server_entries
from aworld_train.engines.verl.agent_workers import agent_loop_workers
from aworld_train.engines.verl.checks import (
    fit_token_budgets,
    refuse_unservable_lora,
    require_v1,
    warn_long_prompts,
)
from aworld_train.engines.verl.cluster import (
    cluster_address,
    forwarded_env,
    join_cluster,
    refuse_resources,
)
from aworld_train.engines.verl.cpu_run import (
    cpu_derived,
    cpu_env,
    cpu_extras,
    is_cpu_run,
    sampler_derived,
    vllm_sampler_env,
    vllm_sampler_extras,
)
from aworld_train.engines.verl.facade import facade_values
from aworld_train.engines.verl.facade import same as facade_same
from aworld_train.engines.verl.modes import require_trainer_mode
from aworld_train.engines.verl.tokens import SPLIT_FIELD
from aworld_train.engines.verl.turn_credit import credit_env
from aworld_train.engines.verl.validation import loop_held_out, val_extra, validation_derived
from aworld_train.engines.verl.verl_config import (
    compose,
    default_rollout,
    native_section,
    validate,
)
from aworld_train.evaluation.held_out import held_out
from aworld_train.inputs.run import RenderedRun, RunInputs
from aworld_train.rollout.samples.codec import TASK_FIELD, chat_prompt, ground_truth_text, task_to_json

AGENT_NAME = "aworld_agent"


def attention_implementation() -> str:
    """verl's actor defaults to flash_attention_2, which verl does not install: use it only when there."""
    return "flash_attention_2" if importlib.util.find_spec("flash_attn") else "sdpa"


def derived_values(inputs: RunInputs, folder: Path, model_path: str) -> list[Derived]:
    cfg = inputs.config
    algo, rollout = cfg.algorithm, cfg.rollout
    reward_path, _, reward_name = inputs.reward.reference.rpartition(":")
    reward_file = module_file(reward_path)
    response_length = rollout.max_response_tokens or rollout.max_new_tokens * rollout.max_assistant_turns * 2
    return [
        Derived("data.train_files", str(folder / "train.parquet"), "data.train"),
        Derived("data.val_files", str(folder / "val.parquet"), "data.test"),
        Derived("data.train_batch_size", cfg.data.batch_size, "data.batch_size"),
        Derived("data.max_response_length", response_length, "rollout.max_response_tokens"),
        *(
            [Derived("data.max_prompt_length", rollout.max_prompt_tokens, "rollout.max_prompt_tokens")]
            if rollout.max_prompt_tokens
            else []
        ),
        Derived("actor_rollout_ref.model.path", model_path, "model"),
        Derived("actor_rollout_ref.model.override_config.attn_implementation", attention_implementation()),
        Derived("actor_rollout_ref.rollout.n", algo.group_size, "algorithm.group_size"),
        Derived("actor_rollout_ref.rollout.name", default_rollout(cfg)),
        Derived("actor_rollout_ref.rollout.temperature", rollout.temperature, "rollout.temperature"),
        Derived("actor_rollout_ref.rollout.calculate_log_probs", True),
        Derived("actor_rollout_ref.rollout.multi_turn.enable", True),
        Derived("actor_rollout_ref.rollout.agent.agent_loop_config_path", str(folder / "agent_loop.yaml")),
        Derived("actor_rollout_ref.rollout.agent.default_agent_loop", AGENT_NAME),
        Derived("actor_rollout_ref.rollout.agent.num_workers", agent_loop_workers(inputs), "rollout.workers"),
        Derived("actor_rollout_ref.actor.optim.lr", algo.lr, "algorithm.lr"),
        Derived("actor_rollout_ref.actor.clip_ratio_low", algo.clip_low, "algorithm.clip_low"),
        Derived("actor_rollout_ref.actor.clip_ratio_high", algo.clip_high, "algorithm.clip_high"),
        Derived("actor_rollout_ref.actor.use_kl_loss", algo.kl_coef > 0, "algorithm.kl_coef"),
        Derived("actor_rollout_ref.actor.kl_loss_coef", algo.kl_coef, "algorithm.kl_coef"),
        Derived("actor_rollout_ref.actor.kl_loss_type", "low_var_kl"),
        Derived("actor_rollout_ref.actor.loss_agg_mode", algo.loss_agg_mode, "algorithm.loss_agg_mode"),
        # token-budgeted micro-batches: agent trajectories vary too much in length for fixed sizes
        Derived("actor_rollout_ref.actor.use_dynamic_bsz", True),
        Derived("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", algo.micro_batch_tokens),
        Derived("actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", True),
        Derived("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", algo.micro_batch_tokens),
        Derived("actor_rollout_ref.ref.log_prob_use_dynamic_bsz", True),
        Derived("actor_rollout_ref.ref.log_prob_max_token_len_per_gpu", algo.micro_batch_tokens),
        Derived("algorithm.norm_adv_by_std_in_grpo", algo.norm_adv_by_std, "algorithm.norm_adv_by_std"),
        # our loop scores every episode itself: verl's reward workers only read reward_score
        Derived("reward.num_workers", 1),
        Derived("reward.custom_reward_function.path", reward_file, "reward.fn"),
        Derived("reward.custom_reward_function.name", reward_name, "reward.fn"),
        # a run continues from the run folder's checkpoints only when asked (`run --resume`)
        Derived("trainer.resume_mode", "disable"),
        Derived("trainer.default_local_dir", str(inputs.run_dir.resolve() / "checkpoints")),
        Derived("trainer.total_training_steps", cfg.trainer.steps, "trainer.steps"),
        Derived("trainer.save_freq", cfg.trainer.save_every or -1, "trainer.save_every"),
        Derived("trainer.project_name", "aworld-train"),
        Derived("trainer.experiment_name", inputs.run_dir.name),
        Derived("trainer.logger", ["console"]),
        *facade_values(cfg),
        *validation_derived(inputs),  # the held-out evaluation, as on every engine
        *sampler_derived(cfg),
        *(cpu_derived(cfg) if is_cpu_run(cfg) else []),
    ]


def merge_native(inputs: RunInputs, folder: Path, model_path: str) -> dict[str, Any]:
    """The user's native verl keys with every blank filled; contradictions raise ConfigError."""
    native = native_section(inputs.config)
    return fill(native, derived_values(inputs, folder, model_path), inputs, "verl", same=_same)


def _same(given: Any, derived: Any, key: str) -> bool:
    agrees = facade_same(given, derived, key)
    if agrees is not None:
        return agrees
    if key == "reward.custom_reward_function.path":
        return Path(str(given)).resolve() == Path(str(derived)).resolve()
    try:
        return float(given) == float(derived)
    except (TypeError, ValueError):
        return given == derived


def write_parquet(tasks, path: Path, eval_seeds: tuple[int, ...] = ()) -> None:
    """verl's row layout (chat `prompt`, `reward_model`, `agent_name`); the task itself rides in
    extra_info, with the split the row is of (the token files tell validation episodes by it).
    Validation rows (`eval_seeds` given) come once per eval seed, each with its seed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    extras = [val_extra(seed) for seed in eval_seeds] or [{SPLIT_FIELD: "train"}]
    rows = [
        {
            "prompt": chat_prompt(task),
            "data_source": task.data_source,
            "agent_name": AGENT_NAME,
            "reward_model": {"style": "rule", "ground_truth": ground_truth_text(task.ground_truth)},
            "extra_info": {"index": index, "task_id": task.id, **extra, TASK_FIELD: task_to_json(task)},
        }
        for index, (extra, task) in enumerate((extra, task) for extra in extras for task in tasks)
    ]
    pq.write_table(pa.Table.from_pylist(rows), path)


def command(folder: Path, config_path: Path) -> tuple[str, ...]:
    return (
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        f"--config-path={folder}",
        f"--config-name={config_path.stem}",
        # Hydra's own output folder goes into the run folder, not the user's working folder
        f"hydra.run.dir={folder / 'hydra'}",
    )


def render(inputs: RunInputs) -> RenderedRun:
    from omegaconf import OmegaConf

    from aworld_train.rollout.policies.models import load_tokenizer, resolve_model_path

    cfg = inputs.config
    folder = (inputs.run_dir / "verl").resolve()
    folder.mkdir(parents=True, exist_ok=True)
    model_path = str(resolve_model_path(cfg.model))
    final = compose(merge_native(inputs, folder, model_path))
    cpu = is_cpu_run(cfg)
    address = cluster_address(cfg)
    if address is not None:
        refuse_resources(cfg, address)
    if cpu:
        cpu_extras(final, joins_cluster=address is not None)
        vllm_sampler_extras(final, cfg, folder)
    env = credit_env(cfg, inputs.run_dir, {**cpu_env(), **vllm_sampler_env(cfg)} if cpu else {})
    if address is not None:
        join_cluster(final, address, forwarded_env(cfg, env))
    require_v1(final)
    # the adapter algorithm.lora asks for, as verl would carry it out (validate_native saw the native keys)
    refuse_unservable_lora(final, str(final.actor_rollout_ref.rollout.name))
    require_trainer_mode(final, inputs)
    fit_token_budgets(final, inputs)
    validate(final)
    warn_long_prompts(final, inputs, load_tokenizer(model_path))
    if inputs.train_tasks:
        write_parquet(inputs.train_tasks, folder / "train.parquet")
    if inputs.test_tasks or inputs.train_tasks:
        val_tasks = inputs.test_tasks or inputs.train_tasks
        write_parquet(val_tasks, folder / "val.parquet", held_out(cfg).seeds)
    spec_path = inputs.spec.write(folder / "agent_spec.yaml")
    rollout = cfg.rollout.model_dump(mode="json")
    loop_entry = {
        "name": AGENT_NAME,
        "_target_": "aworld_train.engines.verl.loop.AWorldAgentLoop",
        "spec_path": str(spec_path),
        "reward": inputs.reward.reference,
        "reward_kwargs": inputs.reward.kwargs,
        "rollout": rollout,
        "held_out": loop_held_out(cfg),  # validation rows' settings and seeds (engines/verl/validation.py)
        "env_servers": server_entries(cfg.env),
        "run_dir": str(inputs.run_dir.resolve()),
    }
    (folder / "agent_loop.yaml").write_text(yaml.safe_dump([loop_entry], sort_keys=False))
    config_path = folder / "verl_config.yaml"
    OmegaConf.save(final, config_path, resolve=False)
    (inputs.run_dir / "config.yaml").write_text(cfg.render())
    return RenderedRun("verl", folder, config_path, command(folder, config_path), final, env)
