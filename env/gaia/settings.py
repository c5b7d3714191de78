"""The gateway's configuration: which tool servers it aggregates and how it serves them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from aworld_train.core.errors import ConfigError

CONFIG_ENV = "GAIA_GATEWAY_CONFIG"
TOKEN_ENV = "GAIA_GATEWAY_TOKEN"
DEFAULT_CONFIG = Path(__file__).with_name("servers.yaml")
# What any tool server's process needs to start (interpreter, locale, temp folder).
BASE_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR", "HOME", "VIRTUAL_ENV", "PYTHONPATH", "LD_LIBRARY_PATH")


class ToolServer(BaseModel):
    """One tool server. Exactly one of `run`, `url`, `command` says how to reach it."""

    model_config = ConfigDict(extra="forbid")

    run: str | None = Field(
        None, description="an aworld-train env server, started and restarted by the gateway"
    )
    url: str | None = Field(None, description="a streamable-HTTP MCP server that runs elsewhere")
    command: str | None = Field(None, description="a stdio MCP server; one process per episode")
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict, description="environment for `run`/`command`")
    pass_env: list[str] = Field(
        default_factory=list,
        description="gateway variables this server may see (those in requires_env pass too); no others do",
    )
    headers: dict[str, str] = Field(default_factory=dict, description="extra headers for `url`")
    timeout_s: float | None = Field(None, gt=0, description="per-call timeout; default: call_timeout_s")
    requires_env: list[str] = Field(default_factory=list, description="disabled unless all are set")

    @model_validator(mode="after")
    def _one_way_to_reach(self) -> ToolServer:
        given = [k for k in ("run", "url", "command") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError(f"set exactly one of run, url, command (got {', '.join(given) or 'none'})")
        return self

    @property
    def kind(self) -> Literal["run", "url", "command"]:
        return next(k for k in ("run", "url", "command") if getattr(self, k))  # type: ignore[return-value]

    def missing_env(self, env: dict[str, str] | None = None) -> list[str]:
        env = {**(os.environ if env is None else env), **self.env}
        return [key for key in self.requires_env if not env.get(key)]

    def child_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The whole environment of this server's process: a minimal base, the variables it
        names, its own `env` and `extra`. Nothing else of the gateway's (its token, other keys)."""
        names = [*BASE_ENV, *self.requires_env, *self.pass_env]
        env = {name: os.environ[name] for name in names if os.environ.get(name)}
        return {**env, **self.env, **(extra or {})}


class GatewaySettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    servers: dict[str, ToolServer]
    call_timeout_s: float = Field(60.0, gt=0)
    connect_timeout_s: float = Field(30.0, gt=0, description="opening an episode's session to a backend")
    session_idle_s: float = Field(
        120.0, gt=0, description="an idle episode's backend sessions close after this"
    )
    max_sessions: int = Field(
        8192, ge=1, description="open backend sessions; past it new episodes are told busy"
    )
    max_connections: int = Field(32, ge=1, description="pooled HTTP connections to each backend")
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Host values accepted besides loopback ones (DNS-rebinding guard), e.g. 'gaia.internal:*'",
    )
    allowed_origins: list[str] = Field(default_factory=list, description="Origin values accepted, if any")
    prefix_tools: bool = Field(False, description="name tools SERVER__TOOL, which allows equal tool names")
    startup_timeout_s: float = Field(120.0, gt=0)

    @model_validator(mode="after")
    def _names(self) -> GatewaySettings:
        bad = [name for name in self.servers if not name or "," in name or name != name.strip()]
        if bad:
            raise ValueError(f"server names must be non-empty and have no commas or spaces: {bad}")
        return self


def load_settings(path: str | Path | None = None) -> GatewaySettings:
    """Settings from `path`, else `$GAIA_GATEWAY_CONFIG`, else the built-in `servers.yaml`."""
    path = Path(path or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG)
    if not path.is_file():
        raise ConfigError(f"gateway config {path} does not exist; set {CONFIG_ENV} to a servers YAML")
    try:
        return GatewaySettings.model_validate(yaml.safe_load(path.read_text()) or {})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"gateway config {path}: {problems}") from None
