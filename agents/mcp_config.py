"""The MCP config shape AWorld agents take, for one streamable-HTTP server."""

from __future__ import annotations


def env_url(variable: str, default: str) -> str:
    """A URL that stays an env reference until a worker runs the agent."""
    return "${" + variable + ":-" + default + "}"


def streamable_http(name: str, url: str, timeout_s: float, headers: dict[str, str] | None = None) -> dict:
    """`{"mcpServers": {name: {...}}}` with the same timeout for the call, the stream and the session."""
    server = {"type": "streamable-http", "url": url}
    if headers:
        server["headers"] = dict(headers)
    server.update(timeout=timeout_s, sse_read_timeout=timeout_s, client_session_timeout_seconds=timeout_s)
    return {"mcpServers": {name: server}}
