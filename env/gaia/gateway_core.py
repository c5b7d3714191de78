"""The GAIA gateway without its HTTP face (gateway.py): which server answers each tool, one backend
session per episode and server (opened within bounds, closed when idle or when the episode is
released), each call with its timeout and its server's crash, a line of `calls.jsonl` per call,
and the health report."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import gc
import json
import logging
import secrets
import shutil
import time
from collections import OrderedDict
from pathlib import Path

import mcp.types as types

from aworld_train.core.errors import ConfigError
from aworld_train.core.protocol import EPISODE_HEADER
from aworld_train.env.gaia.backends import Backend, BackendDown, BackendSession, StatelessSession
from aworld_train.env.gaia.settings import GatewaySettings
from aworld_train.env.gaia.workspaces import ROOT_ENV, SALT_ENV, folder_name, sandbox_root

SERVERS_HEADER = "MCP_SERVERS"
PREFIX_SEPARATOR = "__"
PROBE_EPISODE = "gateway-probe"
CALLS_LOG = "calls.jsonl"
MAX_OPENING = 64  # backend sessions being opened at once; more wait their turn
log = logging.getLogger("aworld_train.gaia.gateway")


class ToolCallFailed(RuntimeError):
    """Becomes an MCP tool error the agent reads; the episode goes on."""


def requested_servers(header: str | None, known: list[str]) -> list[str]:
    """The servers an `MCP_SERVERS` header names; all when it is absent or empty."""
    if not header or not header.strip():
        return list(known)
    names = [n.strip() for n in header.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"{SERVERS_HEADER} names unknown tool servers {unknown}; known: {', '.join(known)}")
    return names


def give_memory_back() -> None:
    """Return freed heap to the system: CPython's allocator and glibc keep it otherwise."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class Busy(ToolCallFailed):
    pass


class Gateway:
    def __init__(
        self, settings: GatewaySettings, log_dir: Path | None = None, root: Path | None = None
    ) -> None:
        self.settings = settings
        self.sandbox_root = root or sandbox_root()
        self.sandbox_salt = secrets.token_hex(16)
        atexit.register(shutil.rmtree, self.sandbox_root, True)
        extra = {ROOT_ENV: str(self.sandbox_root), SALT_ENV: self.sandbox_salt}
        self.backends = {
            name: Backend(
                name, cfg, log_dir, extra if cfg.run == "gaia-python" else None, settings.max_connections
            )
            for name, cfg in settings.servers.items()
        }
        self._open_slots = asyncio.Semaphore(MAX_OPENING)
        self._released = 0
        self.tools: dict[str, list[types.Tool]] = {}  # server -> tools as the gateway lists them
        self.routes: dict[str, tuple[Backend, str]] = {}  # listed tool name -> (backend, its own name)
        self.sessions: OrderedDict[tuple[str, str], BackendSession | StatelessSession] = OrderedDict()
        self._opening: dict[tuple[str, str], asyncio.Lock] = {}
        self._monitor: asyncio.Task | None = None
        # one JSON line per tool call (episode, tool, server, seconds, ok): what reached the tools
        self.calls_log = log_dir / CALLS_LOG if log_dir else None

    # ---- start and stop
    async def start(self) -> None:
        await asyncio.gather(*(backend.start() for backend in self.backends.values()))
        for backend in self.backends.values():
            if backend.status == "ready":
                await self._probe(backend)
        self._build_routes()
        self._monitor = asyncio.create_task(self._supervise(), name="gateway-supervisor")

    async def _probe(self, backend: Backend) -> None:
        session = BackendSession(backend, PROBE_EPISODE)
        try:
            await session.open(self.settings.startup_timeout_s)
            listed = await session.session.list_tools()
        except Exception as exc:
            backend.status, backend.reason = "failed", f"listing its tools failed: {exc!r}"
            log.error("tool server %r: %s", backend.name, backend.reason)
            return
        finally:
            await session.close()
        self.tools[backend.name] = [self._public(backend.name, tool) for tool in listed.tools]

    def _public(self, server: str, tool: types.Tool) -> types.Tool:
        name = f"{server}{PREFIX_SEPARATOR}{tool.name}" if self.settings.prefix_tools else tool.name
        # outputSchema is dropped: results pass through as they come, unvalidated twice.
        return tool.model_copy(update={"name": name, "outputSchema": None})

    def _build_routes(self) -> None:
        owners: dict[str, list[str]] = {}
        for server, tools in self.tools.items():
            for tool in tools:
                owners.setdefault(tool.name, []).append(server)
        clashes = {tool: servers for tool, servers in owners.items() if len(servers) > 1}
        if clashes:
            listed = "; ".join(
                f"{tool!r} on {', '.join(servers)}" for tool, servers in sorted(clashes.items())
            )
            raise ConfigError(
                f"tool names must be unique across servers: {listed}. "
                "Set `prefix_tools: true` in the gateway config (tools become SERVER__TOOL) or drop a server."
            )
        prefix = len(PREFIX_SEPARATOR)
        for server, tools in self.tools.items():
            for tool in tools:
                own = tool.name[len(server) + prefix :] if self.settings.prefix_tools else tool.name
                self.routes[tool.name] = (self.backends[server], own)

    async def close(self) -> None:
        """Close sessions (bounded), stop every server the gateway runs, remove episode files."""
        if self._monitor:
            self._monitor.cancel()
        sessions = list(self.sessions.values())
        self.sessions.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(s.close(1.0) for s in sessions), return_exceptions=True), 5.0
            )
        await asyncio.gather(*(b.stop() for b in self.backends.values()), return_exceptions=True)
        shutil.rmtree(self.sandbox_root, ignore_errors=True)

    async def _supervise(self, every_s: float = 1.0) -> None:
        """Restart crashed `run` backends before a call needs them; close idle sessions."""
        while True:
            await asyncio.sleep(every_s)
            for backend in self.backends.values():
                if backend.status in ("ready", "restarting") and not backend.alive():
                    with contextlib.suppress(BackendDown):
                        await backend.ensure_running()
            now = asyncio.get_running_loop().time()
            idle = [
                k
                for k, s in self.sessions.items()
                if not s.calls and now - s.last_used > self.settings.session_idle_s
            ]
            for key in idle:
                await self._drop(key)
            self._released += len(idle)
            if self._released >= 64 or (self._released and not self.sessions):
                self._released = 0
                give_memory_back()

    # ---- sessions
    async def _session(self, backend: Backend, episode: str) -> BackendSession | StatelessSession:
        key = (episode, backend.name)
        async with self._opening.setdefault(key, asyncio.Lock()):
            session = self.sessions.get(key)
            if session is not None and session.usable:
                self.sessions.move_to_end(key)
                return session
            if session is not None:
                await self._drop(key)
            if len(self.sessions) >= self.settings.max_sessions:
                raise Busy(
                    f"the gateway is busy: {len(self.sessions)} backend sessions are open (max_sessions); "
                    "try again when episodes have ended"
                )
            try:
                await asyncio.wait_for(self._open_slots.acquire(), self.settings.connect_timeout_s)
            except asyncio.TimeoutError:
                raise Busy(
                    f"the gateway is busy: no backend session could start within {self.settings.connect_timeout_s:g}s"
                ) from None
            try:
                session = await backend.session(episode).open(self.settings.connect_timeout_s)
            finally:
                self._open_slots.release()
            self.sessions[key] = session
            return session

    async def _drop(self, key: tuple[str, str]) -> None:
        session = self.sessions.pop(key, None)
        self._opening.pop(key, None)
        if session is not None:
            await session.close()

    async def release(self, episode: str) -> int:
        """Close every session of `episode` and remove its python folder; the sessions closed."""
        keys = [k for k in self.sessions if k[0] == episode]
        await asyncio.gather(*(self._drop(key) for key in keys))
        folder = self.sandbox_root / folder_name(self.sandbox_salt, episode)
        await asyncio.to_thread(shutil.rmtree, folder, True)
        self._released += len(keys)
        return len(keys)

    # ---- MCP
    def list_tools(self, servers: list[str]) -> list[types.Tool]:
        return [tool for server in servers for tool in self.tools.get(server, [])]

    async def call_tool(self, episode: str, servers: list[str], name: str, arguments: dict):
        started = time.monotonic()
        ok = False
        try:
            result = await self._call_tool(episode, servers, name, arguments)
            ok = not result.isError
            return result
        finally:
            self._log_call(episode, name, time.monotonic() - started, ok)

    def _log_call(self, episode: str, tool: str, seconds: float, ok: bool) -> None:
        if self.calls_log is None:
            return
        route = self.routes.get(tool)
        record = {"episode": episode, "tool": tool, "server": route[0].name if route else None,
                  "s": round(seconds, 4), "ok": ok}  # fmt: skip
        with self.calls_log.open("a") as out:
            out.write(json.dumps(record) + "\n")

    async def _call_tool(self, episode: str, servers: list[str], name: str, arguments: dict):
        if not episode.strip():
            raise ToolCallFailed(
                f"no {EPISODE_HEADER} header: tool calls must name their episode, so episodes never share state"
            )
        if name not in self.routes:
            raise ToolCallFailed(f"unknown tool {name!r}; this gateway has {', '.join(sorted(self.routes))}")
        backend, own_name = self.routes[name]
        if backend.name not in servers:
            raise ToolCallFailed(
                f"tool {name!r} is on server {backend.name!r}, which {SERVERS_HEADER} does not name"
            )
        try:
            await backend.ensure_running()
            session = await self._session(backend, episode)
        except Busy:
            raise
        except BackendDown as exc:
            raise ToolCallFailed(str(exc)) from None
        except Exception as exc:
            raise ToolCallFailed(f"tool server {backend.name!r} is unreachable: {exc!r}") from None
        timeout = backend.config.timeout_s or self.settings.call_timeout_s
        call = asyncio.create_task(_counted(session, own_name, arguments, timeout))
        # Only a server the gateway runs has a process to watch; others fail their call themselves.
        death = asyncio.create_task(_wait_for_death(backend)) if backend.config.kind == "run" else None
        try:
            watched = {call, death} if death else {call}
            done, _ = await asyncio.wait(watched, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if death:
                death.cancel()
        if call in done:
            try:
                return call.result()
            except Exception as exc:
                await self._drop((episode, backend.name))
                raise ToolCallFailed(f"tool {name!r} failed on server {backend.name!r}: {exc!r}") from None
        call.cancel()
        await self._drop((episode, backend.name))
        if death is not None and death in done:
            with contextlib.suppress(BackendDown):
                await backend.ensure_running()
            raise ToolCallFailed(
                f"tool server {backend.name!r} crashed during {name!r} and was restarted; "
                "what this task stored on it is lost"
            )
        raise ToolCallFailed(f"tool {name!r} on server {backend.name!r} did not answer within {timeout:g}s")

    def health(self) -> dict:
        servers = {
            name: {
                "status": b.status,
                **({"reason": b.reason} if b.reason else {}),
                "tools": len(self.tools.get(name, [])),
                "restarts": b.restarts,
                **({"pid": b.pid} if b.pid else {}),
            }
            for name, b in self.backends.items()
        }
        ok = all(s["status"] in ("ready", "disabled") for s in servers.values())
        return {"status": "ok" if ok else "degraded", "servers": servers, "sessions": len(self.sessions),
                "episodes": len({episode for episode, _ in self.sessions})}  # fmt: skip


async def _counted(session: BackendSession | StatelessSession, tool: str, arguments: dict, timeout: float):
    """A call that keeps its session from counting as idle until it has ended."""
    session.calls += 1
    try:
        return await session.call(tool, arguments, timeout)
    finally:
        session.calls -= 1
        session.last_used = asyncio.get_running_loop().time()


async def _wait_for_death(backend: Backend, every_s: float = 0.1) -> None:
    while backend.alive():
        await asyncio.sleep(every_s)
