"""Fixes for the MCP servers of this package on mcp 1.10 (the release aworld 0.3.2 pins).

The package now pins mcp 1.30, whose session manager contains a session's errors and ends a
stateless request's server task itself; the fixes below apply only on an mcp 1.10.x, where
they were written and measured, and nothing is changed on any other release.

mcp 1.10's streamable-HTTP session manager runs every session in one task group, so an
error in one session (most often a client that went away before its answer arrived:
ClosedResourceError) cancels the group, and from then on the still-running server
answers every request with HTTP 500. Containing the error inside the session that
raised it keeps the other sessions and the server alive; later mcp releases do the same.

A stateless server (every tool server the GAIA gateway runs, and the gateway itself) has
two more problems in mcp 1.10: the server task it starts for each request is never told
that the request is over, so one task and session stay for every request ever served
(a leak of ~50 KB a request; later mcp releases end them); and it builds its
initialization options for every request, looking up the mcp package's version in its
installed metadata (a scan of site-packages) each time. Here a stateless request's
server input is closed when its response is sent, which ends its task, and the options
are built once per server.
"""

from __future__ import annotations

import logging

log = logging.getLogger("aworld_train.env")


def _mcp_is_1_10() -> bool:
    from importlib.metadata import version

    return version("mcp").startswith("1.10.")


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
    target = logging.getLogger("mcp.server.streamable_http")
    if not any(isinstance(f, _ClosedStandaloneStream) for f in target.filters):
        target.addFilter(_ClosedStandaloneStream())


def contain_session_errors() -> None:
    quiet_closed_streams()  # every release; the rest only on mcp 1.10
    if not _mcp_is_1_10():
        return
    from mcp.server.lowlevel.server import Server

    if getattr(Server.run, "_contains_errors", False):
        return
    original = Server.run

    async def run(self, *args, **kwargs):
        try:
            return await original(self, *args, **kwargs)
        except Exception as exc:  # an ExceptionGroup from the session's own task group, mostly
            log.warning("an MCP session ended with an error; the server goes on: %r", exc)

    run._contains_errors = True  # type: ignore[attr-defined]
    Server.run = run
    _cache_initialization_options(Server)
    _end_stateless_requests()


def _end_stateless_requests() -> None:
    from mcp.server.streamable_http import StreamableHTTPServerTransport

    original = StreamableHTTPServerTransport.handle_request

    async def handle_request(self, scope, receive, send) -> None:
        try:
            await original(self, scope, receive, send)
        finally:
            # Stateless: this request was the transport's only one. Ending the server's input
            # ends its session, which closes its output, which ends the transport's router.
            if self.mcp_session_id is None and self._read_stream_writer is not None:
                await self._read_stream_writer.aclose()

    StreamableHTTPServerTransport.handle_request = handle_request


def _cache_initialization_options(server_class) -> None:
    original = server_class.create_initialization_options

    def create_initialization_options(self, notification_options=None, experimental_capabilities=None):
        if notification_options is not None or experimental_capabilities is not None:
            return original(self, notification_options, experimental_capabilities)
        cached = self.__dict__.get("_aworld_train_init_options")
        if cached is None:  # tools are registered before the first request, so this stays true
            cached = self.__dict__["_aworld_train_init_options"] = original(self)
        return cached

    server_class.create_initialization_options = create_initialization_options


def episode_keyed_settings() -> dict:
    """FastMCP settings of a server that keys its state by the episode header, not by MCP session.

    Stateless with JSON answers: no GET event stream and no DELETE per session, so fewer HTTP
    requests per tool call; quiet, since logging each request costs more CPU than serving it.
    FASTMCP_* variables still decide."""
    return {"log_level": "WARNING", "stateless_http": True, "json_response": True, **settings_from_env()}


def settings_from_env() -> dict:
    """FastMCP settings a parent process sets as FASTMCP_* variables (the GAIA gateway's RUN_ENV).

    mcp 1.10's FastMCP read them from the environment; from mcp 1.2x its constructor passes its
    own defaults explicitly, which win over the environment, so they are read here instead."""
    import os

    out: dict = {}
    for key in ("stateless_http", "json_response"):
        value = os.environ.get(f"FASTMCP_{key.upper()}")
        if value is not None:
            out[key] = value.strip().lower() in ("1", "true", "yes")
    if os.environ.get("FASTMCP_LOG_LEVEL"):
        out["log_level"] = os.environ["FASTMCP_LOG_LEVEL"].upper()
    return out
