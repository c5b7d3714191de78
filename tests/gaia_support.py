"""Starting the GAIA gateway as a plain process on loopback, and calling it, for the tests."""

from __future__ import annotations

import json
import re
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


def _call(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


# One tool call per task of the sample, then an answer read off what the tool returned.
PLAN = {
    "3817 multiplied": (_call("calculate", {"expression": "3817 * 29"}), lambda out: out),
    "total of the Amount": (
        _call("read_document", {"path": "sales.csv"}),
        lambda out: f"{sum(float(line.split('|')[2]) for line in out.splitlines()[1:]):g}",
    ),
    "name of the ship": (
        _call("read_document", {"path": "expedition_note.txt"}),
        lambda out: re.search(r"on the (.+?) with", out).group(1),
    ),
    "quantity below 10": (
        _call("read_document", {"path": "inventory.json"}),
        lambda out: str(len([q for q in re.findall(r'"quantity": (\d+)', out) if int(q) < 10])),
    ),
    "workshop": (
        _call("read_document", {"path": "workshop_report.docx"}),
        lambda out: re.search(r"held in (\w+)", out).group(1),
    ),
    "budget": (
        _call("read_document", {"path": "minutes.pdf"}),
        lambda out: re.search(r"budget of (\d+) euros", out).group(1),
    ),
    "prime numbers": (
        _call(
            "run_python",
            {
                "code": "ps=[n for n in range(101,200) if all(n%d for d in range(2,n))]\n"
                "print(', '.join(map(str, ps[:5])))"
            },
        ),
        lambda out: out.strip(),
    ),  # fmt: skip
    "decimal digits": (_call("run_python", {"code": "print(sum(map(int, str(2**100))))"}), str.strip),
    "Fibonacci": (
        _call("run_python", {"code": "a, b = 1, 1\nfor _ in range(18): a, b = b, a + b\nprint(b)"}),
        str.strip,
    ),
    # A wrong reading on purpose: the scorer must give it 0.
    "highest total": (_call("read_document", {"path": "sales.csv"}), lambda out: "North"),
}


def scripted_gaia_model(tokenizer):
    """A policy for the sample's ten tasks: the planned tool call, then an answer read off its result."""

    def reply(prompt_ids: list[int]) -> str:
        text = tokenizer.decode(prompt_ids)
        question = text.split("<|im_start|>user\n", 1)[1]
        call, answer = next(v for k, v in PLAN.items() if k in question)
        if "<tool_response>" not in text and "<|im_start|>tool" not in text:
            return call
        output = (
            text.rsplit("<tool_response>", 1)[-1]
            if "<tool_response>" in text
            else text.rsplit("tool\n", 1)[-1]
        )
        output = output.split("</tool_response>", 1)[0].split("<|im_end|>", 1)[0].strip()
        return f"I have what I need. <answer>{answer(output)}</answer>"

    return reply
