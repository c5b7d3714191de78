"""A fix for the MCP servers of this package, which run on mcp 1.10 (aworld 0.3.2 pins it).

mcp 1.10's streamable-HTTP session manager runs every session in one task group, so an
error in one session (most often a client that went away before its answer arrived:
ClosedResourceError) cancels the group, and from then on the still-running server
answers every request with HTTP 500. Containing the error inside the session that
raised it keeps the other sessions and the server alive; later mcp releases do the same.
"""

from __future__ import annotations

import logging

log = logging.getLogger("aworld_train.env")


def contain_session_errors() -> None:
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
