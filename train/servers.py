"""Starts the MCP servers a config lists (`env:`) for the length of a run."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from aworld_train.aworld.agent_spec import resolve_env_refs
from aworld_train.config import EnvServerConfig
from aworld_train.protocol import url_variable


@contextlib.contextmanager
def running_envs(
    servers: list[EnvServerConfig], log_dir: str | Path | None = None
) -> Iterator[dict[str, str]]:
    """Start the configured MCP servers, export `<NAME>_MCP_URL` for agent specs, stop them after."""
    from aworld_train.env.launcher import start_server

    started = []
    previous: dict[str, str | None] = {}
    urls: dict[str, str] = {}
    try:
        for server in servers:
            log = Path(log_dir) / f"env-{server.name}.log" if log_dir else None
            if log:
                log.parent.mkdir(parents=True, exist_ok=True)
            # `${VAR:-default}` in a server's env is resolved here, when the server starts.
            env = resolve_env_refs(server.env)
            running = start_server(server.name, port=server.port, log_path=log, env=env)
            started.append(running)
            var = url_variable(server.name)
            previous[var] = os.environ.get(var)
            os.environ[var] = urls[server.name] = running.url
        yield urls
    finally:
        for running in started:
            running.stop()
        for var, value in previous.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
