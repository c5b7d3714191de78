"""GAIA MCP gateway: one streamable-HTTP endpoint (`/mcp`) in front of many tool servers.

- A request lists and calls only the servers its `MCP_SERVERS` header names (all when absent).
- Each episode (`X-Episode-Id`) gets its own MCP session to each backend it uses, so
  rollouts never share one session; idle sessions close after `session_idle_s`.
- Every call has a timeout; a `run` backend that dies is restarted (the call that was
  running on it fails with a message saying so).
- Equal tool names on two servers are refused at start unless `prefix_tools` is set.
- `/health` reports each server (ready, disabled and why, restarts); an optional bearer
  token (`GAIA_GATEWAY_TOKEN`) guards `/mcp`.
- A tool call must name its episode (`X-Episode-Id`); `DELETE /episodes/{id}` closes the
  episode's sessions and removes its python folder (the trainer calls it when the episode
  ends). Past `max_sessions` a new episode is answered "busy" at once, never left waiting.
- `Host` and `Origin` must be loopback names or listed in `allowed_hosts`/`allowed_origins`
  (DNS rebinding); episode folders live under a root the gateway removes when it stops,
  which a restarted python server finds again.
- Every tool call is one line of `calls.jsonl` in the log folder (episode, tool, server,
  seconds, ok).

Run: `aworld-train env up gaia [--port 8080] [--host 127.0.0.1]`.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import gc
import hmac
import json
import logging
import os
import resource
import secrets
import shutil
import sys
import tempfile
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from pathlib import Path

import mcp.types as types
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.provider import AccessToken
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from aworld_train.core.errors import ConfigError
from aworld_train.core.protocol import EPISODE_HEADER, EPISODE_RELEASE_PATH
from aworld_train.env.gaia.backends import Backend, BackendDown, BackendSession, StatelessSession
from aworld_train.env.gaia.sandbox import ROOT_ENV, SALT_ENV, folder_name
from aworld_train.env.gaia.settings import TOKEN_ENV, GatewaySettings, load_settings
from aworld_train.env.mcp_fixes import contain_session_errors

SERVERS_HEADER = "MCP_SERVERS"
PREFIX_SEPARATOR = "__"
PROBE_EPISODE = "gateway-probe"
CALLS_LOG = "calls.jsonl"
SANDBOX_DIR_ENV = "GAIA_SANDBOX_DIR"
ALLOWED_HOSTS_ENV = "GAIA_GATEWAY_ALLOWED_HOSTS"
LOOPBACK_HOSTS = ["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*"]
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


def sandbox_root(base: Path | None = None) -> Path:
    """This gateway's folder for episode files, after removing those of gateways that died."""
    base = base or Path(
        os.environ.get(SANDBOX_DIR_ENV) or Path(tempfile.gettempdir()) / "aworld-gaia-sandbox"
    )
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o711)
    for old in base.glob("run-*"):
        pid = old.name.split("-")[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(old, ignore_errors=True)
    root = base / f"run-{os.getpid()}-{secrets.token_hex(4)}"
    root.mkdir(mode=0o711)
    os.chmod(root, 0o711)
    return root


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


def mcp_server(gateway: Gateway) -> Server:
    contain_session_errors()
    server = Server("aworld-train-gaia-gateway")

    def request_headers():
        request = server.request_context.request
        return request.headers if request is not None else {}

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        servers = requested_servers(request_headers().get(SERVERS_HEADER), list(gateway.backends))
        return gateway.list_tools(servers)

    @server.call_tool(validate_input=False)  # the backend validates its own arguments
    async def call_tool(name: str, arguments: dict):
        headers = request_headers()
        servers = requested_servers(headers.get(SERVERS_HEADER), list(gateway.backends))
        result = await gateway.call_tool(headers.get(EPISODE_HEADER, ""), servers, name, arguments)
        if result.isError:
            raise ToolCallFailed(" ".join(c.text for c in result.content if isinstance(c, types.TextContent)))
        if result.structuredContent is not None:
            return result.content, result.structuredContent
        return result.content

    return server


class StaticTokenVerifier:
    """The MCP SDK's bearer-auth middleware with one fixed token instead of an OAuth server."""

    def __init__(self, token: str) -> None:
        self._token = token

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode(), self._token.encode()):
            return AccessToken(token=token, client_id="gaia-gateway", scopes=[], expires_at=None)
        return None


class HostCheck:
    """Refuses requests whose Host or Origin is not allowed (DNS rebinding), on every route,
    with the MCP SDK's own transport-security check."""

    def __init__(self, app, settings: TransportSecuritySettings) -> None:
        self.app = app
        self.check = TransportSecurityMiddleware(settings)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            refused = await self.check.validate_request(Request(scope), is_post=False)
            if refused is not None:
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _Asgi:
    """An ASGI callable that Starlette's Route passes the raw scope (a plain function it would
    wrap as a request handler)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        await self.app(scope, receive, send)


def security_settings(settings: GatewaySettings, host: str = "127.0.0.1", port: int | None = None):
    hosts = [*LOOPBACK_HOSTS, *settings.allowed_hosts]
    hosts += [h.strip() for h in os.environ.get(ALLOWED_HOSTS_ENV, "").split(",") if h.strip()]
    if host not in ("0.0.0.0", "::", "127.0.0.1", "localhost", "::1"):
        hosts += [host, f"{host}:*"]
    origins = [*settings.allowed_origins, *(f"{scheme}://{h}" for h in hosts for scheme in ("http", "https"))]
    return TransportSecuritySettings(allowed_hosts=hosts, allowed_origins=origins)


def build_app(gateway: Gateway, token: str | None = None, host: str = "127.0.0.1") -> Starlette:
    manager = StreamableHTTPSessionManager(app=mcp_server(gateway), stateless=True, json_response=True)

    async def handle_mcp(scope, receive, send) -> None:
        await manager.handle_request(scope, receive, send)

    async def health(_: Request) -> JSONResponse:
        report = gateway.health()
        return JSONResponse(report, status_code=200 if report["status"] == "ok" else 503)

    async def release(request: Request) -> JSONResponse:
        if token and not request.user.is_authenticated:
            return JSONResponse({"error": "invalid_token"}, status_code=401)
        closed = await gateway.release(request.path_params["episode_id"])
        return JSONResponse({"closed_sessions": closed})

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        started = time.monotonic()
        await gateway.start()
        async with manager.run():
            print(
                f"gateway ready in {time.monotonic() - started:.1f}s: {gateway.health()['servers']}",
                flush=True,
            )
            yield
        await gateway.close()

    middleware = []
    mcp_app = handle_mcp
    if token:
        middleware = [
            Middleware(AuthenticationMiddleware, backend=BearerAuthBackend(StaticTokenVerifier(token))),
            Middleware(AuthContextMiddleware),
        ]
        mcp_app = RequireAuthMiddleware(handle_mcp, required_scopes=[])
    routes = [
        Route("/health", health),
        # `:path`: an id holding "/" arrives percent-encoded and is decoded before routing.
        Route(EPISODE_RELEASE_PATH.replace("}", ":path}"), release, methods=["DELETE"]),
        # `/mcp` itself is served, not redirected to `/mcp/`: a redirect doubles every request.
        Route("/mcp", endpoint=_Asgi(mcp_app), methods=["GET", "POST", "DELETE"]),
        Mount("/mcp", app=mcp_app),
    ]
    security = security_settings(gateway.settings, host)
    middleware = [Middleware(HostCheck, settings=security), *middleware]
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)


def _use_system_allocator() -> None:
    """Start again (same pid, same command line) with CPython's small-object allocator off.

    A thousand episodes leave CPython's arenas partly used, and an arena goes back to the
    system only when wholly free: RSS stayed ~50% above its level before the episodes. With
    every allocation in glibc's heap, `malloc_trim` (after releases) returns free pages
    wherever they are, and RSS comes back to within ~10%."""
    if os.environ.get("PYTHONMALLOC") or sys.platform != "linux" or not getattr(sys, "orig_argv", None):
        return
    os.execve(sys.executable, sys.orig_argv, {**os.environ, "PYTHONMALLOC": "malloc"})


def serve(transport: str = "http", host: str = "127.0.0.1", port: int = 8080) -> None:
    import uvicorn

    if transport != "http":
        raise SystemExit("the gaia gateway serves streamable HTTP only; drop --transport stdio")
    _use_system_allocator()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "mcp"):  # one line per backend request otherwise
        logging.getLogger(noisy).setLevel(logging.WARNING)
    token = os.environ.get(TOKEN_ENV) or None
    if host not in ("127.0.0.1", "localhost", "::1") and not token:
        log.warning("serving on %s without a token: anyone who reaches this port can run tools", host)
    log_dir = Path(os.environ.get("GAIA_GATEWAY_LOG_DIR") or Path.cwd() / "gaia-gateway-logs")
    log_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(log_dir, 0o700)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):  # a socket and a pipe or two per episode
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    gateway = Gateway(load_settings(), log_dir)
    uvicorn.run(
        build_app(gateway, token, host), host=host, port=port, log_level="warning", timeout_graceful_shutdown=3,
        backlog=4096, timeout_keep_alive=30,  # clients reuse their connection between an episode's calls
    )  # fmt: skip
