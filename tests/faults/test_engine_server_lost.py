"""A launched engine (verl here; AReaL launches the same way) whose `env:` server dies and cannot
come back: the supervisor gives it up, ends the engine's process, and the run fails with the
server's log instead of running on with every episode failing. The engine is a stand-in process
(the rendered run's command replaced) that kills the calculator server and takes its port."""

from __future__ import annotations

import sys
import time

import pytest
from backend_support import trainer_for
from faults_support import record

from aworld_train.core.errors import ToolServerLost

ENGINE = """
import os, signal, socket
from urllib.parse import urlparse

import psutil

port = urlparse(os.environ["CALCULATOR_MCP_URL"]).port
for c in psutil.net_connections(kind="tcp"):
    if c.status == psutil.CONN_LISTEN and c.laddr.port == port:
        os.kill(c.pid, signal.SIGKILL)
holder = socket.socket()
holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
while True:  # the port frees as the server dies, long before a new one could bind it
    try:
        holder.bind(("127.0.0.1", port))
        break
    except OSError:
        pass
holder.listen()
print("ENGINE holds the port", flush=True)
while True:
    connection, _ = holder.accept()
    connection.close()
"""


def test_a_server_given_up_ends_the_engine_and_the_run(tmp_path, monkeypatch):
    from aworld_train.engines.verl import render as verl_render
    from aworld_train.env.supervisor import ServerSupervisor
    from aworld_train.prerun import checks as preflight

    monkeypatch.setattr(ServerSupervisor, "ATTEMPTS", 2)
    monkeypatch.setattr(ServerSupervisor, "FIRST_WAIT_S", 0.1)
    monkeypatch.setattr(preflight, "require_checks", lambda inputs, engine, run: None)
    monkeypatch.setattr(verl_render, "command", lambda folder, config_path: (sys.executable, "-c", ENGINE))
    started = time.monotonic()
    with pytest.raises(
        ToolServerLost, match=r"env server 'calculator' .* did not start again in 2 attempt"
    ) as lost:
        trainer_for(tmp_path, {"backend": "verl"}).train()
    assert "address already in use" in str(lost.value) and "--resume" in str(lost.value)
    took = time.monotonic() - started
    assert took < 60  # the engine was ended, not waited out
    log = (tmp_path / "run" / "verl.log").read_text()
    assert log.strip().endswith("ENGINE holds the port")  # ended by the supervisor, nothing after
    record(
        fault="`env:` MCP server SIGKILL under a launched engine, its port then taken",
        where="verl's process (a stand-in) running",
        run="given up after 2 attempts; the engine's process ended; the run failed with the server's log (exit 1)",
        steps="-",
        lost="the run",
        resources=f"{took:.1f} s from launch to the run's error",
    )
