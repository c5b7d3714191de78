"""The contract between rollouts and tool servers; the ground floor of the package.

Both sides import it: episodes send these headers and read `<NAME>_MCP_URL`; the MCP
servers under `env/` key their state by the headers. It imports nothing else of
aworld_train, so a tool server never pulls in the rollout core or an engine.
"""

from __future__ import annotations

import os
import re
from typing import Any

# Stateful servers key their state by the episode (ARCHITECTURE.md invariant 3), not by MCP session.
EPISODE_HEADER = "X-Episode-Id"
# Servers that serve dataset entries (BFCL) also need the row and the user turn.
TASK_HEADER = "X-Task-Id"
TURN_HEADER = "X-Episode-Turn"

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
