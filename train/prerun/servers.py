"""Starts the MCP servers a config lists (`env:`) for the length of a run."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from aworld_train.core.errors import ConfigError
from aworld_train.core.protocol import MissingVariable, resolve_env_refs, url_variable
from aworld_train.inputs.config import EnvServerConfig

if TYPE_CHECKING:
    from aworld_train.env.supervisor import ServerSupervisor


def server_environment(index: int, server: EnvServerConfig) -> dict[str, str]:
    """The extra environment of the `env:` entry at `index`, its `${VAR}` references resolved
    now; an unset variable is an error naming the entry."""
    resolved = {}
    for key, value in server.env.items():
        try:
            resolved[key] = resolve_env_refs(value)
        except MissingVariable as exc:
            raise ConfigError(
                f"env[{index}] ({server.name}): env.{key} is {value!r}, and {exc.name} is not set: export "
                f"{exc.name} (or put it in a .env file beside the config), or give a default, "
                f"'${{{exc.name}:-value}}'"
            ) from None
    return resolved


def check_server_environments(servers: list[EnvServerConfig]) -> None:
    """Every `env:` entry's references resolve, before any model loads or server starts."""
    for index, server in enumerate(servers):
        server_environment(index, server)


@contextlib.contextmanager
def running_envs(
    servers: list[EnvServerConfig], log_dir: str | Path | None = None
) -> Iterator[ServerSupervisor]:
    """Start the configured MCP servers, export `<NAME>_MCP_URL` for agent specs, keep them up
    while the block runs (a server that exits is started again: env/supervisor.py), stop them after.
    The supervisor it yields says whether a server was given up (`check()`)."""
    from aworld_train.env.launcher import start_server
    from aworld_train.env.supervisor import ServerSupervisor

    started = []
    previous: dict[str, str | None] = {}
    supervisor = None
    try:
        for index, server in enumerate(servers):
            log = Path(log_dir) / f"env-{server.name}.log" if log_dir else None
            if log:
                log.parent.mkdir(parents=True, exist_ok=True)
            # `${VAR:-default}` in a server's env is resolved here, when the server starts.
            env = server_environment(index, server)
            # a trainer that is killed takes its servers with it (no orphan holds the port)
            running = start_server(server.name, port=server.port, log_path=log, env=env, die_with_parent=True)
            started.append((running, env))
            var = url_variable(server.name)
            previous[var] = os.environ.get(var)
            os.environ[var] = running.url
        supervisor = ServerSupervisor(started).start()
        yield supervisor
    finally:
        if supervisor is not None:
            supervisor.stop()
        else:
            for running, _ in started:
                running.stop()
        for var, value in previous.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
