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

import contextlib
import hmac
import logging
import os
import resource
import sys
import time
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

from aworld_train.core.protocol import EPISODE_HEADER, EPISODE_RELEASE_PATH
from aworld_train.env.gaia.gateway_core import SERVERS_HEADER, Gateway, ToolCallFailed, log, requested_servers
from aworld_train.env.gaia.settings import TOKEN_ENV, GatewaySettings, load_settings
from aworld_train.env.mcp_fixes import contain_session_errors

ALLOWED_HOSTS_ENV = "GAIA_GATEWAY_ALLOWED_HOSTS"
LOOPBACK_HOSTS = ["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*"]


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
