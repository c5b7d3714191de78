"""Whether an episode's MCP server is up is told by a TCP connect (rollout/episodes/tool_servers.py):
a live server must not be taken for a dead one because the episode's own event loop was behind,
and a stopped one must be told at once."""

from __future__ import annotations

import asyncio
import socket
import time

from aworld_train.rollout.episodes.tool_servers import reachable


async def test_a_live_server_is_reachable_though_the_episodes_event_loop_was_held_up():
    server = await asyncio.start_server(lambda reader, writer: writer.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        check = asyncio.create_task(reachable(f"http://127.0.0.1:{port}/mcp"))
        await asyncio.sleep(0)  # the connect is under way
        time.sleep(3)  # the loop held up, as dozens of episodes starting at once on a loaded CPU hold it
        assert await check
    finally:
        server.close()


async def test_a_stopped_server_is_unreachable_without_waiting_out_the_timeout():
    with socket.socket() as sock:  # a port that was free a moment ago, and that nothing listens on now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert not await asyncio.wait_for(reachable(f"http://127.0.0.1:{port}/mcp"), timeout=5)
