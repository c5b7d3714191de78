"""What the MCP servers of this package change in mcp, declared in
SERVER_PATCHES of the one patch table (train/core/patch_table.py).

mcp 1.30 (the pinned release) contains a session's errors and ends a stateless request's server
task itself; what is left is one log filter, guarded against an mcp whose source it was not
written for.
"""

from __future__ import annotations

import logging

from aworld_train.core.patch_table import SERVER_PATCHES
from aworld_train.core.upstream import guard


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
    guard(SERVER_PATCHES, "mcp", "aworld-train's MCP log filter")
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
