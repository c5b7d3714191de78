"""Keeps a run's `env:` MCP servers up: a server process that exits is started again on its port.

A tool server that crashes (killed, out of memory, a bug on one input) would otherwise end every
later episode as `tool_server_down` until the run stops. A thread watches the processes; one that
exited is started again on the same host and port (the agents' `<NAME>_MCP_URL` stays right) with
bounded attempts and exponential backoff (tenacity). Episodes in flight while it was down end as
`tool_server_down` and carry no loss; later ones reach the new process. A server that does not
come back is given up: `check()` then raises `ToolServerLost` with its log's last lines, and the
callbacks given to `on_give_up` run (a launcher ends the engine it started).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_when_event_set,
    wait_exponential,
)

from aworld_train.core.errors import ToolServerLost
from aworld_train.env.launcher import RunningServer, spawn_server, wait_until_listening

logger = logging.getLogger(__name__)

LOG_TAIL_LINES = 20


@dataclass
class Restart:
    """One time a server stopped, and what the supervisor did about it."""

    name: str
    exit_code: int | None
    attempts: int = 0
    down_s: float = 0.0  # from noticing the exit to the new process accepting connections
    error: str | None = None  # the last attempt's failure, when it never came back


@dataclass
class _Watched:
    running: RunningServer
    env: dict[str, str]
    restarts: list[Restart] = field(default_factory=list)
    up_since: float = 0.0  # when its last restart answered


class ServerSupervisor:
    """Watches `servers` (started by the caller) from a thread of its own, which also starts the
    new processes: they are started to die with it (Linux), and it lives until `stop()`.

    A server that exits again within STABLE_S of coming back goes on with the attempts its last
    restart left: a server that crashes as soon as it starts is given up, not restarted forever."""

    ATTEMPTS = 5  # starts tried per outage
    FIRST_WAIT_S = 0.5  # backoff before the second attempt, doubling up to MAX_WAIT_S
    MAX_WAIT_S = 8.0
    STABLE_S = 30.0
    STARTUP_TIMEOUT_S = 60.0
    POLL_S = 0.25

    def __init__(self, servers: list[tuple[RunningServer, dict[str, str]]]) -> None:
        self._watched = [_Watched(running, env) for running, env in servers]
        self._stopping = threading.Event()
        self._settled = threading.Condition()
        self._restarting: str | None = None
        self._lost: ToolServerLost | None = None
        self._on_give_up: list[Callable[[ToolServerLost], None]] = []
        self._thread = threading.Thread(target=self._watch, name="aworld-train-env-supervisor", daemon=True)

    # -- the caller's side ------------------------------------------------------------------
    @property
    def urls(self) -> dict[str, str]:
        return {w.running.name: w.running.url for w in self._watched}

    @property
    def restarts(self) -> list[Restart]:
        return [r for w in self._watched for r in w.restarts]

    def servers(self) -> list[RunningServer]:
        return [w.running for w in self._watched]

    def start(self) -> ServerSupervisor:
        if self._watched:
            self._thread.start()
        return self

    def on_give_up(self, callback: Callable[[ToolServerLost], None]) -> None:
        self._on_give_up.append(callback)

    def check(self, wait: bool = True) -> None:
        """Raise ToolServerLost if a server was given up; with `wait`, first let a restart in
        progress end either way (bounded by its attempts)."""
        with self._settled:
            while wait and self._restarting is not None and not self._stopping.is_set():
                self._settled.wait(1.0)
            if self._lost is not None:
                raise self._lost

    def stop(self) -> None:
        """Stop watching, then stop every server (a restart in progress gives up at once)."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()
        for watched in self._watched:
            watched.running.stop()

    # -- the watching thread ------------------------------------------------------------------
    def _watch(self) -> None:
        while not self._stopping.wait(self.POLL_S):
            for watched in self._watched:
                if watched.running.alive() or self._lost is not None:
                    continue
                try:
                    self._restart(watched)
                except Exception as exc:  # a bug here must not end the watch silently
                    logger.exception("env server supervisor: %s", exc)

    def _restart(self, watched: _Watched) -> None:
        old = watched.running
        event = Restart(old.name, old.process.returncode)
        began = time.monotonic()
        last = watched.restarts[-1] if watched.restarts else None
        # exited soon after its last restart: the same outage, with the attempts it has left
        used = last.attempts if last is not None and began - watched.up_since < self.STABLE_S else 0
        watched.restarts.append(event)
        logger.warning(
            "env server %r (port %d) exited with code %s; starting it again",
            old.name,
            old.port,
            event.exit_code,
        )
        with self._settled:
            self._restarting = old.name
        try:
            event.attempts = used
            if used >= self.ATTEMPTS:
                raise RuntimeError(f"it exited again within {self.STABLE_S:g}s of each restart")
            retrying = Retrying(
                stop=stop_after_attempt(self.ATTEMPTS - used) | stop_when_event_set(self._stopping),
                wait=wait_exponential(multiplier=self.FIRST_WAIT_S, max=self.MAX_WAIT_S),
                retry=retry_if_exception_type((RuntimeError, OSError)),
                sleep=self._stopping.wait,  # the backoff ends at once when the run stops
                reraise=True,
            )
            for attempt in retrying:
                with attempt:
                    event.attempts = used + attempt.retry_state.attempt_number
                    if self._stopping.is_set():
                        raise RuntimeError("the run stopped first")
                    spawned = spawn_server(
                        old.name, old.port, old.host, old.log_path, env=watched.env, die_with_parent=True
                    )
                    watched.running = spawned
                    wait_until_listening(spawned, self.STARTUP_TIMEOUT_S)
            watched.up_since = time.monotonic()
            event.down_s = round(watched.up_since - began, 3)
            logger.warning("env server %r answers again on port %d (%.1fs)", old.name, old.port, event.down_s)
        except (RuntimeError, OSError) as exc:
            event.error = str(exc)
            if not self._stopping.is_set():
                self._give_up(watched, event)
        finally:
            with self._settled:
                self._restarting = None
                self._settled.notify_all()

    def _give_up(self, watched: _Watched, event: Restart) -> None:
        running = watched.running
        lost = ToolServerLost(
            f"env server {running.name!r} (port {running.port}) exited with code {event.exit_code} during the "
            f"run and did not start again in {event.attempts} attempt(s) ({event.error}); "
            + log_tail(running.log_path)
            + ". Fix what its log shows (or free the port), then continue the run with `aworld-train run "
            "CONFIG --resume`"
        )
        with self._settled:
            self._lost = lost
        for callback in self._on_give_up:
            try:
                callback(lost)
            except Exception as exc:
                logger.exception("env server supervisor: a give-up callback raised %s", exc)


def log_tail(log_path: Path | None, lines: int = LOG_TAIL_LINES) -> str:
    """`its log PATH ends: | line ...`, or why there is none to show."""
    if log_path is None:
        return "it kept no log (its output went nowhere)"
    if not log_path.is_file():
        return f"its log {log_path} does not exist"
    tail = log_path.read_text(errors="replace").splitlines()[-lines:]
    if not tail:
        return f"its log {log_path} is empty"
    return f"its log {log_path} ends:\n" + "\n".join(f"  | {line}" for line in tail)
