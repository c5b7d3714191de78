"""Starting the GAIA gateway as a plain process on loopback, and calling it, for the tests."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import yaml
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

from aworld_train.env.launcher import RunningServer, start_server

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "train_gaia_with_aworld_verl" / "gaia_sample" / "2023" / "validation"
TOKEN = "gateway-test-token"


@dataclass
class Gateway(RunningServer):
    """A started gateway, with the folder its episode roots go in."""

    sandbox_dir: Path | None = None

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def sandbox_root(self) -> Path:
        """This gateway's root of episode folders (`run-<pid>-<hex>`)."""
        return next(self.sandbox_dir.glob(f"run-{self.process.pid}-*"))


def start_gateway(
    tmp_path: Path, servers: dict, token: str | None = TOKEN, env: dict | None = None, **settings
) -> Gateway:
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = tmp_path / "servers.yaml"
    config.write_text(yaml.safe_dump({"servers": servers, **settings}))
    env = {
        "GAIA_GATEWAY_CONFIG": str(config),
        "GAIA_GATEWAY_LOG_DIR": str(tmp_path / "logs"),
        "GAIA_SANDBOX_DIR": str(tmp_path / "sandbox"),
        **(env or {}),
    }
    if token:
        env["GAIA_GATEWAY_TOKEN"] = token
    server = start_server("gaia", log_path=tmp_path / "gateway.log", env=env, startup_timeout_s=120)
    return Gateway(**vars(server), sandbox_dir=tmp_path / "sandbox")


def standard_servers() -> dict:
    return {
        "documents": {"run": "gaia-documents", "env": {"GAIA_FILES_DIR": str(SAMPLE)}},
        "python": {"run": "gaia-python"},
        "calculator": {"run": "calculator"},
        "slow": {
            "command": sys.executable,
            "args": [str(ROOT / "tests" / "slow_mcp_server.py"), "stdio"],
            "timeout_s": 4,
        },
        "search": {"run": "gaia-search", "requires_env": ["GOOGLE_API_KEY", "GOOGLE_CSE_ID"]},
    }


def headers(episode: str | None = None, servers: str | None = None, token: str | None = TOKEN) -> dict:
    out = {}
    if token:
        out["Authorization"] = f"Bearer {token}"
    if episode:
        out["X-Episode-Id"] = episode
    if servers is not None:
        out["MCP_SERVERS"] = servers
    return out


async def list_tool_names(url: str, **kw) -> list[str]:
    async with streamablehttp_client(url, headers=headers(**kw)) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return [tool.name for tool in (await session.list_tools()).tools]


async def call_tool(url: str, tool: str, arguments: dict, **kw):
    async with streamablehttp_client(url, headers=headers(**kw)) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await session.call_tool(tool, arguments)


def text_of(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "text", None) is not None)
