"""The MCP config an AWorld agent uses to reach the GAIA gateway."""

from __future__ import annotations

import os
from typing import Any

from aworld_train.agents.mcp_config import streamable_http
from aworld_train.core.protocol import is_env_reference

GATEWAY_NAME = "aworld-mcp"
URL_ENV = "MCP_SERVER_URL"
AUTH_ENV = "MCP_SERVER_AUTHORIZATION"
# The gateway `aworld-train run` starts exports GAIA_MCP_URL; run-local.sh's container listens on 8080.
DEFAULT_URL = "${GAIA_MCP_URL:-http://127.0.0.1:8080/mcp}"
DEFAULT_SERVERS = ["documents", "python", "calculator", "search"]
TIMEOUT_S = 600


def get_agent_tool_env_and_servers(
    url: str | None = None,
    servers: list[str] | None = None,
    authorization: str | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """`({"mcpServers": {...}}, server names)` for an Agent's `mcp_config` / `mcp_servers`.

    `url` defaults to `$MCP_SERVER_URL`, else the gateway a run starts (`$GAIA_MCP_URL`,
    resolved when the agent runs), else http://127.0.0.1:8080/mcp. `servers` become the
    `MCP_SERVERS` header. A given `authorization` (a token, `Bearer ...`, or a `${VAR}`
    reference) is kept out of the config: its value goes into `$MCP_SERVER_AUTHORIZATION`
    and the header holds the reference, which aworld-train resolves in each worker.
    """
    servers = list(servers) if servers is not None else list(DEFAULT_SERVERS)
    headers: dict[str, str] = {"MCP_SERVERS": ",".join(servers)}
    if authorization:
        if is_env_reference(authorization):
            headers["Authorization"] = authorization
        else:
            value = (
                authorization if authorization.lower().startswith("bearer ") else f"Bearer {authorization}"
            )
            os.environ[AUTH_ENV] = value
            headers["Authorization"] = f"${{{AUTH_ENV}}}"
    url = url or os.environ.get(URL_ENV) or DEFAULT_URL
    return streamable_http(GATEWAY_NAME, url, TIMEOUT_S, headers), servers
