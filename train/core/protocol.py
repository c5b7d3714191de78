"""The contract between rollouts and tool servers; the ground floor of the package.

Both sides import it: episodes send these headers and read `<NAME>_MCP_URL`; the MCP
servers under `env/` key their state by the headers. It imports nothing else of
aworld_train, so a tool server never pulls in the rollout core or an engine.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

# Stateful servers key their state by the episode (ARCHITECTURE.md invariant 3), not by MCP session.
EPISODE_HEADER = "X-Episode-Id"
# Servers that serve dataset entries (BFCL) also need the row and the user turn.
TASK_HEADER = "X-Task-Id"
TURN_HEADER = "X-Episode-Turn"

# A server that keeps state per episode may offer to drop it at this path, relative to its MCP
# URL's base (the URL less its last segment, `/mcp`). When an episode ends, whatever its
# status, the rollout sends DELETE there once, after its last tool call, best effort: a
# server without the route answers 404/405 and nothing else happens. The GAIA gateway closes
# the episode's backend sessions and removes its files, answering {"closed_sessions": N}.
EPISODE_RELEASE_PATH = "/episodes/{episode_id}"

# A tool server whose own backend (an AgentGym environment server, StableToolBench's API server)
# does not answer fails the call with this mark in its error text; the episode then ends as
# `tool_server_down`, a failure that carries no loss, never as `ok` on an answer the environment
# did not give.
SERVER_DOWN_MARK = "[tool_server_down]"

ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class MissingVariable(KeyError):
    """A `${VAR}` reference without a default names a variable that is not set."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"environment variable {self.name} is not set"


def url_variable(server_name: str) -> str:
    """The variable that carries a started MCP server's URL: `calculator` -> `CALCULATOR_MCP_URL`."""
    return f"{server_name.upper().replace('-', '_')}_MCP_URL"


def release_url(mcp_url: str, episode_id: str) -> str:
    """Where to release `episode_id` on the server at `mcp_url`:
    `http://h:8080/mcp` -> `http://h:8080/episodes/<id>` (the id percent-encoded)."""
    parts = urlsplit(mcp_url)
    base = parts.path.rstrip("/").rsplit("/", 1)[0]
    path = base + EPISODE_RELEASE_PATH.format(episode_id=quote(episode_id, safe=""))
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def is_env_reference(value: str) -> bool:
    """Whether `value` is a single `${VAR}` / `${VAR:-default}` reference."""
    return ENV_REF.fullmatch(value) is not None


def resolve_env_refs(obj: Any, env: dict[str, str] | None = None) -> Any:
    """`${VAR}` references in strings, dicts and lists replaced by their values.

    `${VAR:-default}` falls back to the default; a missing variable without one
    raises MissingVariable (callers turn it into their own error with context)."""
    env = dict(os.environ if env is None else env)
    if isinstance(obj, str):

        def sub(match: re.Match) -> str:
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            raise MissingVariable(name)

        return ENV_REF.sub(sub, obj)
    if isinstance(obj, dict):
        return {k: resolve_env_refs(v, env) for k, v in obj.items()}
    if isinstance(obj, list):
        return [resolve_env_refs(v, env) for v in obj]
    return obj
