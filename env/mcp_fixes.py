"""What the MCP servers of this package change in mcp, declared in PATCHES (see env/upstream.py).

mcp 1.30 (the pinned release) contains a session's errors and ends a stateless request's server
task itself; what is left is one log filter, guarded against an mcp whose source it was not
written for.
"""

from __future__ import annotations

import logging

from aworld_train.env.upstream import RELIES_ON, Patch, guard

PATCHES: tuple[Patch, ...] = (
    Patch(
        "mcp.server.streamable_http.StreamableHTTPServerTransport._handle_get_request",
        "mcp",
        "1.30.0",
        "8f6eb97823f9eb435e17bf1be6755ae5ff50bc7ac98800bc668aa0f0043e2f87",
        RELIES_ON,
        (
            "aworld_train.env.mcp_fixes.quiet_closed_streams",
            "aworld_train.env.mcp_fixes._ClosedStandaloneStream.filter",
        ),
        'its "Error in standalone SSE writer" record for a closed GET stream cost ~80 ms of CPU an episode',
    ),
)


class _ClosedStandaloneStream(logging.Filter):
    """Drops mcp's ERROR record for a client that closed its GET (standalone SSE) stream.

    AWorld's MCP client closes that stream with every session it ends; mcp logs each close
    as an error with a traceback, which FastMCP's rich handler renders with syntax
    highlighting: about 80 ms of the server's CPU per episode, more than all its real work.
    Any other error, in that writer or elsewhere, is still logged.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        import anyio

        exc = record.exc_info[1] if record.exc_info else None
        closed = isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError)
        return not (closed and record.getMessage() == "Error in standalone SSE writer")


def quiet_closed_streams() -> None:
    guard(PATCHES, "mcp", "aworld-train's MCP log filter")
    target = logging.getLogger("mcp.server.streamable_http")
    if not any(isinstance(f, _ClosedStandaloneStream) for f in target.filters):
        target.addFilter(_ClosedStandaloneStream())


def contain_session_errors() -> None:
    """What every tool server applies to mcp before it serves (mcp 1.30 contains session errors
    itself; the name stays for the servers that call it)."""
    quiet_closed_streams()


def episode_keyed_settings() -> dict:
    """FastMCP settings of a server that keys its state by the episode header, not by MCP session.

    Stateless with JSON answers: no GET event stream and no DELETE per session, so fewer HTTP
    requests per tool call; quiet, since logging each request costs more CPU than serving it.
    FASTMCP_* variables still decide."""
    return {"log_level": "WARNING", "stateless_http": True, "json_response": True, **settings_from_env()}


def settings_from_env() -> dict:
    """FastMCP settings a parent process sets as FASTMCP_* variables (the GAIA gateway's RUN_ENV).

    FastMCP's constructor passes its own defaults explicitly, which win over the environment, so
    they are read here."""
    import os

    out: dict = {}
    for key in ("stateless_http", "json_response"):
        value = os.environ.get(f"FASTMCP_{key.upper()}")
        if value is not None:
            out[key] = value.strip().lower() in ("1", "true", "yes")
    if os.environ.get("FASTMCP_LOG_LEVEL"):
        out["log_level"] = os.environ["FASTMCP_LOG_LEVEL"].upper()
    return out
