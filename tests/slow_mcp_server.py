"""A misbehaving MCP server for failure tests: `slow` sleeps, `crash` kills the process.

python tests/slow_mcp_server.py PORT    (streamable HTTP)
python tests/slow_mcp_server.py stdio
"""

import asyncio
import os
import sys

from mcp.server.fastmcp import FastMCP

STDIO = sys.argv[1] == "stdio"
server = FastMCP("slow", host="127.0.0.1", port=0 if STDIO else int(sys.argv[1]))


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return "done"


@server.tool()
def crash() -> str:
    """Kill the server process mid-call."""
    os._exit(1)


if __name__ == "__main__":
    server.run(transport="stdio" if STDIO else "streamable-http")
