"""The release contract between rollouts and tool servers (protocol.EPISODE_RELEASE_PATH) on the
rollout side; tests/test_gaia_agent.py shows the real gateway left with no session after episodes."""

import time

from aworld_train.core.protocol import release_url
from aworld_train.env.launcher import free_port
from aworld_train.rollout.episodes.release import release_on_servers, release_targets


def test_the_release_url_replaces_the_mcp_segment():
    assert release_url("http://127.0.0.1:8080/mcp", "ep-1") == "http://127.0.0.1:8080/episodes/ep-1"
    assert (
        release_url("https://gw.internal/gaia/mcp/", "a/b c") == "https://gw.internal/gaia/episodes/a%2Fb%20c"
    )
    assert release_url("http://h:1/mcp?x=1", "e") == "http://h:1/episodes/e"


def test_targets_are_the_streamable_http_servers_with_their_resolved_authorization(monkeypatch):
    monkeypatch.setenv("GW_AUTH", "Bearer t0ken")
    monkeypatch.delenv("NOT_SET_URL", raising=False)
    config = {
        "mcpServers": {
            "gateway": {
                "type": "streamable-http",
                "url": "${GW_URL:-http://127.0.0.1:9/mcp}",
                "headers": {"Authorization": "${GW_AUTH}", "MCP_SERVERS": "python"},
            },
            "stdio": {"command": "python", "args": ["-m", "x"]},
            "sse": {"type": "sse", "url": "http://127.0.0.1:9/sse"},
            "unresolvable": {"type": "streamable-http", "url": "${NOT_SET_URL}"},
        }
    }
    assert release_targets(config, "e1") == [
        ("http://127.0.0.1:9/episodes/e1", {"Authorization": "Bearer t0ken"})
    ]
    assert release_targets({}, "e1") == []


async def test_a_server_without_the_route_or_one_that_is_down_costs_nothing(calculator_server):
    config = {
        "mcpServers": {
            "calculator": {"type": "streamable-http", "url": calculator_server.url},  # answers 404
            "down": {"type": "streamable-http", "url": f"http://127.0.0.1:{free_port()}/mcp"},
        }
    }
    started = time.monotonic()
    assert await release_on_servers(config, "nobody") == 0
    assert time.monotonic() - started < 3
