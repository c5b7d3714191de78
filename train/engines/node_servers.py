"""The config's `env:` MCP servers on every node that runs episodes.

`aworld-train run` starts the `env:` servers on the launching node, bound to loopback, and exports
`<NAME>_MCP_URL`. On a Ray cluster verl (and AReaL) place episode workers on other nodes too, where
that loopback URL reaches nothing (or another process) and every episode would end
`tool_server_down`. So an engine's episode worker calls `node_server_urls` once per process before
its first episode: a server whose exported URL answers here is on this node (its loopback) and is
used as it is; any other is started in this worker, on this node's loopback, its log in the run
folder as `env-<name>-node-<ip>.log`, and its `<NAME>_MCP_URL` set in this process, which the
agent's `${<NAME>_MCP_URL}` reference and an agent process started after it read. The servers
keep per-episode state keyed by the episode header, so which node serves a call never matters.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from aworld_train.core.protocol import resolve_env_refs, url_variable

_LOCK = threading.Lock()
_URLS: dict[str, dict[str, str]] = {}  # by the servers' JSON: what this process resolved
_STARTED: list[Any] = []


def server_entries(servers: list[Any]) -> list[dict[str, Any]]:
    """The `env:` entries a worker needs (name, environment with its `${VAR}` references, per_node)."""
    return [{"name": s.name, "env": dict(s.env), "per_node": s.per_node} for s in servers]


def node_server_urls(servers: list[dict[str, Any]], log_dir: str | Path) -> dict[str, str]:
    """Each `env:` server's URL on this node, started here where none answers (see the module)."""
    key = json.dumps(servers, sort_keys=True)
    with _LOCK:
        if key not in _URLS:
            _URLS[key] = {
                s["name"]: _on_this_node(s, Path(log_dir)) for s in servers if s.get("per_node", True)
            }
        return _URLS[key]


def _on_this_node(server: dict[str, Any], log_dir: Path) -> str:
    from aworld_train.env.launcher import start_server

    name = server["name"]
    variable = url_variable(name)
    exported = os.environ.get(variable)
    if exported and answers_here(exported):
        return exported
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"env-{name}-node-{node_address()}.log"
    running = start_server(name, log_path=log, env=resolve_env_refs(server.get("env") or {}))
    if not _STARTED:
        atexit.register(_stop_all)
    _STARTED.append(running)
    os.environ[variable] = running.url
    return running.url


def answers_here(url: str, timeout_s: float = 1.0) -> bool:
    """Whether something on this node accepts connections at `url` (a loopback URL is this node's)."""
    from aworld_train.env.launcher import port_open

    parsed = urlparse(url)
    return port_open(parsed.hostname, parsed.port or 80, timeout_s)


def node_address() -> str:
    """This node's address as Ray knows it, else its host name."""
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - a name for a log file; the host name will do
        pass
    return socket.gethostname()


def _stop_all() -> None:
    for running in _STARTED:
        running.stop()
