"""verl's own config: Hydra's `ppo_trainer` defaults, and the user's native `verl:` section read
against them (the reward's keyword arguments taken out, the legacy top-level custom_reward_function
moved under reward) and checked, before anything loads. render.py fills it for a run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aworld_train.core.errors import ConfigError
from aworld_train.engines.native import (
    BLANK,
    get,
    put,
    unknown_key_message,
)
from aworld_train.engines.verl.checks import (
    refuse_unservable_lora,
    require_v1,
)
from aworld_train.engines.verl.cluster import (
    check_ray_environment,
)
from aworld_train.engines.verl.cpu_run import (
    is_cpu_run,
    refuse_unrunnable_vllm_sampler,
)
from aworld_train.engines.verl.facade import facade_limits
from aworld_train.inputs.run import NativeInputs

if TYPE_CHECKING:
    from aworld_train.inputs.config import TrainConfig

OPEN_SECTIONS = (
    "actor_rollout_ref.model.override_config",
    "critic.model.override_config",
    "trainer.v1.sampler.sampler_kwargs",  # a custom sampler's own options (engines/verl/episodes.py)
)


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
