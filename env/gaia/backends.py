"""How the gateway reaches one tool server, and one episode's MCP session to it."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from pathlib import Path

import httpx
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from aworld_train.core.protocol import EPISODE_HEADER
from aworld_train.env.gaia.settings import ToolServer
from aworld_train.env.launcher import RunningServer, _die_with_parent, free_port, wait_until_listening

# Servers the gateway runs answer statelessly in plain JSON: an episode's session to them is
# then two requests to open and one per call, with no standing stream or server-side state
# (episodes are told apart by the X-Episode-Id header, not by MCP session).
RUN_ENV = {
    "FASTMCP_STATELESS_HTTP": "true",
    "FASTMCP_JSON_RESPONSE": "true",
    "FASTMCP_LOG_LEVEL": "WARNING",  # a rich log line per request costs more than the request
    "PYTHONUNBUFFERED": "1",
}

log = logging.getLogger("aworld_train.gaia.gateway")


SESSION_TIMEOUT = httpx.Timeout(30.0, read=None)  # a tool call may stream as long as it runs


class BackendDown(RuntimeError):
    """The tool server is not running (crashed, disabled, or failed to start)."""


class Backend:
    """One configured tool server: starts it (for `run`), restarts it, opens sessions to it."""

    def __init__(
        self, name: str, config: ToolServer, log_dir: Path | None = None, extra_env: dict[str, str] | None = None,
        max_connections: int = 32,
    ) -> None:  # fmt: skip
        self.name = name
        self.config = config
        self.log_dir = log_dir
        self.extra_env = extra_env or {}
        # One pooled HTTP client for all of this backend's sessions (a client each costs ~1 MB).
        # Idle connections are dropped after 2 s, before the server's own 5 s keep-alive ends
        # them: reusing one the server is closing fails the request with a ReadError.
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections, keepalive_expiry=2.0
        )
        self.transport = httpx.AsyncHTTPTransport(limits=limits)
        self.http = httpx.AsyncClient(
            transport=self.transport, timeout=SESSION_TIMEOUT, follow_redirects=True
        )
        # Requests past the pool's size wait here, not in httpcore's queue, whose every
        # hand-over scans all waiting requests (quadratic with a thousand episodes).
        self.slots = asyncio.Semaphore(max_connections)
        self.status = "starting"
        self.reason = ""
        self.restarts = 0
        self.generation = 0  # bumps on every restart; sessions of older generations are stale
        self._process: RunningServer | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        missing = self.config.missing_env()
        if missing:
            self.status, self.reason = "disabled", f"set {', '.join(missing)} to enable it"
            return
        if self.config.kind == "run":
            await self._spawn()
        self.status = "ready"

    async def _spawn(self) -> None:
        log_path = self.log_dir / f"{self.name}.log" if self.log_dir else None
        port = free_port()
        cmd = [
            sys.executable,
            "-m",
            "aworld_train.env",
            self.config.run,
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
        ]
        log = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - owned by the process
        # Spawned from the event loop's thread, which lives as long as the gateway: the
        # child's parent-death signal follows the spawning thread, not the process.
        process = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=self.config.child_env({**RUN_ENV, **self.extra_env}),
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )  # fmt: skip
        server = RunningServer(self.config.run, "127.0.0.1", port, process, log_path)
        self._process = await asyncio.to_thread(wait_until_listening, server, 120.0)

    def alive(self) -> bool:
        return self._process is None or self._process.alive()

    async def ensure_running(self) -> None:
        """Restart a `run` server that died; raise BackendDown for a disabled one."""
        if self.status == "disabled":
            raise BackendDown(f"tool server {self.name!r} is disabled: {self.reason}")
        if self.alive():
            return
        async with self._lock:
            if self.alive():
                return
            log.warning(
                "tool server %r exited (code %s); restarting", self.name, self._process.process.returncode
            )
            self.status = "restarting"
            try:
                await self._spawn()
            except Exception as exc:
                self.status, self.reason = "failed", str(exc)
                raise BackendDown(f"tool server {self.name!r} could not be restarted: {exc}") from exc
            self.restarts += 1
            self.generation += 1
            self.status = "ready"

    @property
    def pid(self) -> int | None:
        return self._process.process.pid if self._process else None

    @property
    def url(self) -> str | None:
        return self._process.url if self._process else self.config.url

    @property
    def stateless(self) -> bool:
        """Servers the gateway runs itself answer statelessly (RUN_ENV); others may keep MCP session state."""
        return self.config.kind == "run"

    def session(self, episode: str) -> BackendSession | StatelessSession:
        return StatelessSession(self, episode) if self.stateless else BackendSession(self, episode)

    @asynccontextmanager
    async def streams(self, episode: str) -> AsyncIterator[tuple]:
        """The (read, write) streams of a new MCP connection for `episode`."""
        if self.config.kind == "command":
            params = StdioServerParameters(
                command=self.config.command, args=self.config.args,
                env=self.config.child_env({"AWORLD_TRAIN_EPISODE_ID": episode}),
            )  # fmt: skip
            async with stdio_client(params) as (read, write):
                yield read, write
        else:
            client = session_client(self.transport, {**self.config.headers, EPISODE_HEADER: episode})
            async with streamable_http_client(self.url, http_client=client) as (read, write, _):
                yield read, write

    async def stop(self) -> None:
        if self._process is not None:
            await asyncio.to_thread(self._process.stop, 3.0)
        await self.http.aclose()


def session_client(
    transport: httpx.AsyncBaseTransport, headers: dict[str, str], timeout: httpx.Timeout = SESSION_TIMEOUT
) -> httpx.AsyncClient:
    """The HTTP client of one MCP session: its own headers (the `mcp` client sends a session's
    requests with its client's headers) over connections pooled for every session. Never
    close it: closing a client closes its transport, the pool the other sessions use."""
    return httpx.AsyncClient(transport=transport, headers=headers, timeout=timeout)


class StatelessSession:
    """One episode's session to a stateless backend: no MCP handshake and no standing task;
    each call is one JSON-RPC request over the backend's pooled client, carrying the
    episode id, which is all such a server keys its state by."""

    _ids = itertools.count(1)

    def __init__(self, backend: Backend, episode: str) -> None:
        self.backend = backend
        self.episode = episode
        self.generation = backend.generation
        self.last_used = asyncio.get_running_loop().time()
        self.calls = 0  # in flight; the gateway never closes a session as idle while one runs
        self._headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            EPISODE_HEADER: episode,
        }

    async def open(self, timeout_s: float) -> StatelessSession:
        return self

    @property
    def usable(self) -> bool:
        return self.generation == self.backend.generation

    async def call(self, tool: str, arguments: dict, timeout_s: float) -> types.CallToolResult:
        self.last_used = asyncio.get_running_loop().time()
        request = types.JSONRPCRequest(
            jsonrpc="2.0",
            id=next(self._ids),
            method="tools/call",
            params={"name": tool, "arguments": arguments},
        )
        body = request.model_dump_json(by_alias=True, exclude_none=True)
        async with self.backend.slots:
            # `/mcp/`: the server's mount; `/mcp` answers with a redirect first.
            url = self.backend.url.rstrip("/") + "/"
            response = await self.backend.http.post(
                url, content=body, headers=self._headers, timeout=timeout_s + 5
            )
        if not response.content:
            response.raise_for_status()
        message = types.JSONRPCMessage.model_validate_json(response.content).root
        if isinstance(message, types.JSONRPCError):
            raise RuntimeError(f"{message.error.message} (code {message.error.code})")
        if not isinstance(message, types.JSONRPCResponse):
            raise RuntimeError(f"expected a JSON-RPC response, got {type(message).__name__}")
        return types.CallToolResult.model_validate(message.result)

    async def close(self, timeout_s: float = 5.0) -> None:
        return None


class BackendSession:
    """One episode's MCP session to one backend (a `url` or `command` server).

    The session lives in a task of its own: the MCP client's context managers hold anyio
    cancel scopes, which must be entered and exited by the same task, while tool calls
    come from whichever request handler task serves them.
    """

    def __init__(self, backend: Backend, episode: str) -> None:
        self.backend = backend
        self.episode = episode
        self.generation = backend.generation
        self.session: ClientSession | None = None
        self.last_used = asyncio.get_running_loop().time()
        self.calls = 0
        self._ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self._close = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def open(self, timeout_s: float) -> BackendSession:
        self._task = asyncio.create_task(self._own(), name=f"session:{self.backend.name}:{self.episode}")
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), timeout_s)
        except BaseException:
            await self.close()
            raise
        return self

    async def _own(self) -> None:
        try:
            async with AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self.backend.streams(self.episode))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                self.session = session
                self._ready.set_result(None)
                await self._close.wait()
        except BaseException as exc:  # reported to the opener; a closed session just ends
            if not self._ready.done():
                self._ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            if not isinstance(exc, Exception):
                raise
        finally:
            self.session = None

    @property
    def usable(self) -> bool:
        return self.session is not None and self.generation == self.backend.generation

    async def call(self, tool: str, arguments: dict, timeout_s: float):
        self.last_used = asyncio.get_running_loop().time()
        return await self.session.call_tool(
            tool, arguments, read_timeout_seconds=timedelta(seconds=timeout_s + 5)
        )

    async def close(self, timeout_s: float = 5.0) -> None:
        self._close.set()
        if self._task is not None and not self._task.done():
            done, _ = await asyncio.wait({self._task}, timeout=timeout_s)
            if not done:
                self._task.cancel()
                with contextlib.suppress(BaseException):
                    await self._task
