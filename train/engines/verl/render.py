"""backend: verl: render the run folder, then launch `python -m verl.trainer.main_ppo`.

The final config is verl's own defaults, plus the user's native `verl:` keys,
plus values derived from the common config and the trainer's inputs. The rules:
a value the user gave wins; an absent, empty or `auto` value is filled; a user
value that contradicts the common section is an error. Nothing is left at
verl's example defaults (gsm8k paths, its reward) without the user saying so.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from aworld_train.core.errors import ConfigError
from aworld_train.engines.native import (
    BLANK,
    Derived,
    fill,
    get,
    module_file,
    put,
    unknown_key_message,
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
    check_ray_environment,
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
    refuse_unrunnable_vllm_sampler,
    sampler_derived,
    vllm_sampler_env,
    vllm_sampler_extras,
)
from aworld_train.engines.verl.facade import facade_limits, facade_values
from aworld_train.engines.verl.facade import same as facade_same
from aworld_train.engines.verl.modes import require_trainer_mode
from aworld_train.engines.verl.tokens import SPLIT_FIELD
from aworld_train.engines.verl.turn_credit import credit_env
from aworld_train.engines.verl.validation import loop_held_out, val_extra, validation_derived
from aworld_train.evaluation.held_out import held_out
from aworld_train.inputs.run import NativeInputs, RenderedRun, RunInputs
from aworld_train.rollout.samples.codec import TASK_FIELD, chat_prompt, ground_truth_text, task_to_json

if TYPE_CHECKING:
    from aworld_train.inputs.config import TrainConfig

AGENT_NAME = "aworld_agent"
OPEN_SECTIONS = (
    "actor_rollout_ref.model.override_config",
    "critic.model.override_config",
    "trainer.v1.sampler.sampler_kwargs",  # a custom sampler's own options (engines/verl/episodes.py)
)


def attention_implementation() -> str:
    """verl's actor defaults to flash_attention_2, which verl does not install: use it only when there."""
    return "flash_attention_2" if importlib.util.find_spec("flash_attn") else "sdpa"


def verl_config_dir() -> Path:
    try:
        import verl
    except ImportError:
        raise ConfigError("backend 'verl' needs the verl extra: pip install 'aworld-train[verl]'") from None
    return Path(verl.__file__).parent / "trainer" / "config"


def native_value(cfg, dotted: str) -> Any:
    """A key of the user's native `verl:` section; None where absent, empty or `auto`."""
    value = get(cfg.verl, dotted) if cfg.backend == "verl" else None
    return None if value in BLANK else value


def default_rollout(cfg: TrainConfig) -> str:
    """The rollout a run gets where its `verl:` section names none."""
    return "aworld_cpu" if is_cpu_run(cfg) else "vllm"


def native_inputs(cfg: TrainConfig) -> NativeInputs:
    """A native verl config may name its own parquet files, its reward (custom_reward_function)
    and the reward's keyword arguments (see `reward_kwargs_of`)."""
    reward = None
    for section in ("reward.custom_reward_function", "custom_reward_function"):
        path = native_value(cfg, f"{section}.path")
        if path:
            reward = f"{path}:{native_value(cfg, f'{section}.name') or 'compute_score'}"
            break
    return NativeInputs(
        reward=reward,
        has_train_files=native_value(cfg, "data.train_files") is not None,
        reward_kwargs=reward_kwargs_of(cfg.verl) if cfg.backend == "verl" else {},
    )


_KWARGS_MAPPINGS = (
    "reward_model.reward_kwargs",
    "custom_reward_function.reward_kwargs",
    "reward.custom_reward_function.reward_kwargs",
)


def _own_reward_model_keys(native: dict[str, Any]) -> list[str]:
    """Keys of the user's `reward_model` section that verl's own section lacks: reward settings
    such as ToolBench's `format_reward_weight`, which verl would refuse."""
    section = native.get("reward_model")
    if not isinstance(section, dict):
        return []
    known = set(verl_defaults().reward_model.keys()) | {"reward_kwargs"}
    return [key for key in section if key not in known]


def reward_kwargs_of(native: dict[str, Any]) -> dict[str, Any]:
    """The reward's keyword arguments a native verl YAML holds: `reward_model.<key>` keys verl
    does not know, and the `reward_kwargs` mappings of reward_model and custom_reward_function."""
    out: dict[str, Any] = {}
    for dotted in _KWARGS_MAPPINGS:
        value = get(native, dotted)
        if isinstance(value, dict):
            out.update(value)
    section = native.get("reward_model") or {}
    out.update({key: section[key] for key in _own_reward_model_keys(native)})
    return out


def _without_reward_kwargs(native: dict[str, Any]) -> dict[str, Any]:
    """`native` less the reward kwargs, which our loop passes to the reward itself."""
    for key in _own_reward_model_keys(native):
        native["reward_model"].pop(key)
    for dotted in _KWARGS_MAPPINGS:
        parent, _, leaf = dotted.rpartition(".")
        node = get(native, parent)
        if isinstance(node, dict):
            node.pop(leaf, None)
    return native


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


def native_section(cfg: TrainConfig) -> dict[str, Any]:
    """The user's native verl keys as verl reads them: less the reward's keyword arguments, and
    the legacy top-level custom_reward_function under reward (where verl 0.9 reads it)."""
    native = _without_reward_kwargs(json.loads(json.dumps(cfg.verl)))
    legacy = native.pop("custom_reward_function", None)
    if isinstance(legacy, dict):
        for key, value in legacy.items():
            if get(native, f"reward.custom_reward_function.{key}") in BLANK:
                put(native, f"reward.custom_reward_function.{key}", value)
    return native


def validate_native(cfg: TrainConfig) -> None:
    """The `verl:` section alone, against verl's own config: its keys exist, and it keeps the V1
    trainer; RAY_ADDRESS, if the run reads it, is an address. Nothing loads; the render checks the
    filled config again."""
    check_ray_environment(cfg)
    refuse_unrunnable_vllm_sampler(cfg)
    limits = facade_limits(cfg)
    if limits:
        raise ConfigError("verl cannot honour: " + "; ".join(limits))
    composed = compose(native_section(cfg))
    require_v1(composed)
    rollout = native_value(cfg, "actor_rollout_ref.rollout.name") or default_rollout(cfg)
    refuse_unservable_lora(composed, str(rollout))


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


def verl_defaults(overrides: list[str] | tuple[str, ...] = ()) -> Any:
    """verl's own `ppo_trainer` config, composed by Hydra as main_ppo would (no GPU needed)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=list(overrides))


def compose(native: dict[str, Any]) -> Any:
    """verl's ppo_trainer defaults with `native` merged in; unknown keys are errors."""
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError

    base = verl_defaults()
    OmegaConf.set_struct(base, True)
    # transformers config overrides: an open mapping in verl (its YAML gives `{}`)
    for section in OPEN_SECTIONS:
        node = OmegaConf.select(base, section)
        if node is not None:
            OmegaConf.set_struct(node, False)
    try:
        return OmegaConf.merge(base, OmegaConf.create(native))
    except ConfigKeyError as exc:
        raise ConfigError(unknown_key_message(base, exc, "verl", "verl's ppo_trainer config")) from None


def validate(final) -> None:
    """verl's own dataclasses check the sections our loop and its workers read."""
    from verl.utils.config import omega_conf_to_dataclass

    try:
        omega_conf_to_dataclass(final.actor_rollout_ref.rollout)
        omega_conf_to_dataclass(final.actor_rollout_ref.actor)
    except Exception as exc:
        raise ConfigError(f"verl rejects the rendered config: {exc}") from None


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
