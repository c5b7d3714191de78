"""Start and stop MCP servers as child processes for a run or a test."""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from aworld_train.core.errors import ConfigError

SERVERS = {
    "calculator": "aworld_train.env.calculator:serve",
    "multistep": "aworld_train.env.multistep:serve",
    "reports": "aworld_train.env.reports:serve",
    "gaia": "aworld_train.env.gaia.gateway:serve",
    "gaia-documents": "aworld_train.env.gaia.documents:serve",
    "gaia-python": "aworld_train.env.gaia.python_sandbox:serve",
    "gaia-search": "aworld_train.env.gaia.search:serve",
    "bfcl": "aworld_train.env.bfcl.server:serve",
    "agentgym": "aworld_train.env.agentgym.bridge:serve",
    # Servers that speak AgentGym's HTTP protocol (not MCP): the bridge's backends.
    "agentgym-textcraft": "aworld_train.env.agentgym.textcraft:serve",
    "agentgym-babyai": "aworld_train.env.agentgym.babyai:serve",
    "toolbench": "aworld_train.env.toolbench.server:serve",
    "toolbench-cache": "aworld_train.env.toolbench.virtual:serve",
    "four-tools": "aworld_train.env.four_tools.server:serve",
}


def import_serve(name: str):
    if name not in SERVERS:
        raise ConfigError(f"unknown env server {name!r}; known: {', '.join(sorted(SERVERS))}")
    module, _, attr = SERVERS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def server_options(name: str, serve, **given: str | None) -> dict[str, str]:
    """The options given for server `name` (`--env`, `--server`), refused where its serve()
    takes no such parameter."""
    import inspect

    options = {k: v for k, v in given.items() if v is not None}
    accepted = inspect.signature(serve).parameters
    unknown = [k for k in options if k not in accepted]
    if unknown:
        flags = ", ".join(f"--{k}" for k in unknown)
        raise ConfigError(f"env server {name!r} takes no {flags}; only the agentgym bridge does")
    return options


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass
class RunningServer:
    name: str
    host: str
    port: int
    process: subprocess.Popen
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/mcp"

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        """Hard kill, as a crash would."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the parent dies, so a killed gateway leaves no orphans."""
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def spawn_server(
    name: str,
    port: int = 0,
    host: str = "127.0.0.1",
    log_path: str | Path | None = None,
    *,
    env: dict[str, str] | None = None,
    die_with_parent: bool = False,
) -> RunningServer:
    """Start server `name` over streamable HTTP without waiting for it.

    With `die_with_parent`, the child is ended when the spawning thread's process dies
    (Linux); spawn from a long-lived thread, since the signal follows the thread.
    """
    import_serve(name)  # fails early on unknown names
    port = port or free_port(host)
    cmd = [sys.executable, "-m", "aworld_train.env", name, "--port", str(port), "--host", host]
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - owned by the process
    process = subprocess.Popen(
        cmd,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
        preexec_fn=_die_with_parent if die_with_parent and sys.platform == "linux" else None,
    )
    return RunningServer(name, host, port, process, Path(log_path) if log_path else None)


def wait_until_listening(server: RunningServer, startup_timeout_s: float = 60.0) -> RunningServer:
    """Return `server` once it accepts connections; kill it and raise if it exits or takes too long."""
    name, host, port, process = server.name, server.host, server.port, server.process
    deadline = time.monotonic() + startup_timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"env server {name!r} exited with code {process.returncode} while starting; see {server.log_path}"
            )
        if port_open(host, port):
            return server
        time.sleep(0.1)
    server.kill()
    raise RuntimeError(
        f"env server {name!r} did not accept connections on {host}:{port} within {startup_timeout_s:g}s"
    )


def start_server(
    name: str,
    port: int = 0,
    host: str = "127.0.0.1",
    log_path: str | Path | None = None,
    *,
    startup_timeout_s: float = 60.0,
    env: dict[str, str] | None = None,
    die_with_parent: bool = False,
) -> RunningServer:
    """Start server `name` over streamable HTTP and wait until it accepts connections."""
    return wait_until_listening(
        spawn_server(name, port, host, log_path, env=env, die_with_parent=die_with_parent), startup_timeout_s
    )
