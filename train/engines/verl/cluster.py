"""A verl run that joins a Ray cluster already running (`trainer.ray_address`, else `RAY_ADDRESS`)
instead of starting one of its own.

Ray refuses `num_cpus`/`num_gpus` when it joins a cluster (the cluster has its resources), so the
render leaves them out and refuses a user's. Workers on a cluster do not inherit the launching
process's environment: they get the environment of `ray start` on their node. So the variables a
run needs reach them through verl's `ray_kwargs.ray_init.runtime_env.env_vars`: the CPU run's
settings, the `<NAME>_MCP_URL` of the servers `aworld-train run` started (the launching node's
workers reach those; the others start their own, `engines/node_servers.py`) and `AWORLD_TRAIN_*`
settings. Secrets never go there (the rendered config is on disk): a `${VAR}` the agent spec
references must be set on every node, and `run` checks that it is (`prerun/cluster.py`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from aworld_train.core.errors import ConfigError
from aworld_train.core.protocol import url_variable
from aworld_train.engines.native import BLANK, get

if TYPE_CHECKING:
    from aworld_train.inputs.config import TrainConfig

_RESOURCES = ("num_cpus", "num_gpus")


def cluster_address(cfg: TrainConfig) -> str | None:
    """The Ray cluster the run joins, or None (verl starts its own)."""
    return cfg.trainer.ray_address or os.environ.get("RAY_ADDRESS") or None


def check_ray_environment(cfg: TrainConfig) -> None:
    """RAY_ADDRESS, read when trainer.ray_address is unset, is an address (checked before any
    server starts; the config's own field is checked when it is read)."""
    from aworld_train.inputs.trainer_settings import ray_address_problem

    value = os.environ.get("RAY_ADDRESS")
    problem = ray_address_problem(value) if value and not cfg.trainer.ray_address else None
    if problem is not None:
        raise ConfigError(f"RAY_ADDRESS (read as trainer.ray_address): {problem}; or unset it")


def forwarded_env(cfg: TrainConfig, engine_env: dict[str, str]) -> dict[str, str]:
    """What every worker of the cluster gets in its environment (no secret among them)."""
    env = dict(engine_env)
    for server in cfg.env:
        variable = url_variable(server.name)
        if variable in os.environ:
            env[variable] = os.environ[variable]
    env.update({k: v for k, v in os.environ.items() if k.startswith("AWORLD_TRAIN_")})
    return env


def refuse_resources(cfg: TrainConfig, address: str) -> None:
    for key in _RESOURCES:
        if get(cfg.verl, f"ray_kwargs.ray_init.{key}") not in BLANK:
            raise ConfigError(
                f"verl.ray_kwargs.ray_init.{key} is set, but the run joins the Ray cluster at {address}, "
                "whose nodes bring their own resources (ray start --num-cpus/--num-gpus): remove it"
            )


def join_cluster(final: Any, address: str, env: dict[str, str]) -> None:
    """Point the composed config at the cluster and forward `env` to its workers."""
    from omegaconf import open_dict

    with open_dict(final):
        ray_init = final.ray_kwargs.ray_init
        for key in _RESOURCES:
            ray_init.pop(key, None)
        ray_init.address = address
        runtime_env = ray_init.runtime_env
        env_vars = dict(runtime_env.get("env_vars") or {})
        runtime_env.env_vars = {**env, **env_vars}  # a value the user gave wins
