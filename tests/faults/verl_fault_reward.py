"""A fault for verl's CPU run, with its reward: verl's agent-loop worker loads this file by path
(the run's `reward.fn`), and from then on the first episode of the run that asks for its tools
kills the calculator MCP server (SIGKILL) at that instant, once: the first process to create the
file FAULT_KILL_MARKER names (inherited from the test by verl's workers) does it, writes the
pid it killed there and waits until its socket is closed. That episode's own check then finds the
server gone; the run's supervisor
starts it again; later episodes reach the new process."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the dense reward

from verl_cpu_support import distinct_chars  # noqa: E402

from aworld_train.rollout.episodes.tool_servers import ToolServers  # noqa: E402

__all__ = ["distinct_chars"]


def kill_server_once() -> None:
    import psutil

    port = urlparse(os.environ.get("CALCULATOR_MCP_URL", "")).port
    marker = os.environ.get("FAULT_KILL_MARKER")
    if port is None or not marker:
        return
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # one process, once
    except FileExistsError:
        return
    for connection in psutil.net_connections(kind="tcp"):
        if connection.status == psutil.CONN_LISTEN and connection.laddr.port == port and connection.pid:
            os.kill(connection.pid, signal.SIGKILL)
            os.write(fd, str(connection.pid).encode())
            wait_until_closed(port, connection.pid)
    os.close(fd)


def wait_until_closed(port: int, pid: int, timeout_s: float = 10.0) -> None:
    """Until the killed process's listening socket is gone: a signal is delivered, not acted on, by
    `kill`, and until the kernel closes the socket a connection still succeeds, so the episode's
    check right after could find the server up."""
    import psutil

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        listening = psutil.net_connections(kind="tcp")
        if not any(
            c.status == psutil.CONN_LISTEN and c.laddr.port == port and c.pid == pid for c in listening
        ):
            return
        time.sleep(0.01)


_missing = ToolServers.missing


async def _killing_first(self, tools, role, first_call: bool):
    if first_call:
        kill_server_once()
    return await _missing(self, tools, role, first_call)


ToolServers.missing = _killing_first
