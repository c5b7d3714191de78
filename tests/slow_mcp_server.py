"""A misbehaving MCP server for failure tests: `slow` sleeps, `crash` kills the process,
`lookup` answers a random number except for a task whose id starts with `hang`: there it hangs.

python tests/slow_mcp_server.py PORT    (streamable HTTP)
python tests/slow_mcp_server.py stdio
"""

import asyncio
import os
import random
import sys

from mcp.server.fastmcp import Context, FastMCP

from aworld_train.protocol import TASK_HEADER

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


@server.tool()
async def lookup(ctx: Context) -> str:
    """Look up this task's number."""
    request = ctx.request_context.request
    task = request.headers.get(TASK_HEADER, "") if request is not None else ""
    if task.startswith("hang"):
        await asyncio.sleep(3600)
    return f"{random.random():.4f}"


if __name__ == "__main__":
    server.run(transport="stdio" if STDIO else "streamable-http")
