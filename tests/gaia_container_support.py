"""The GAIA gateway's container, as env/gaia/run-local.sh starts it: what the tests that run against
it share (tests/test_gaia_container.py, tests/faults/test_gaia_restart.py)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from docker_support import GAIA_ENV, base_image, compose_env, host_ca_bundle
from gaia_support import SAMPLE, TOKEN

from aworld_train.env.launcher import free_port

MEMORY = "3g"


class Container:
    def __init__(self, port: int, project: str, env: dict, output: str, timings: dict) -> None:
        self.port, self.project, self.env, self.output, self.timings = port, project, env, output, timings
        self.url = f"http://127.0.0.1:{port}/mcp"

    def compose(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["docker", "compose", "-f", str(GAIA_ENV / "docker-compose.yaml"), *args],
            env=self.env, capture_output=True, text=True, timeout=600, check=check,
        )  # fmt: skip

    def inspect(self) -> dict:
        name = self.compose("ps", "-q", "gateway").stdout.strip()
        return json.loads(subprocess.run(["docker", "inspect", name], capture_output=True, text=True).stdout)[
            0
        ]

    def python_log(self) -> str:
        return self.compose("exec", "-T", "gateway", "cat", "/var/lib/gaia-gateway/logs/python.log").stdout


def run_local(env: dict) -> tuple[str, dict]:
    """env/gaia/run-local.sh, its output, and when it built, started and answered /health."""
    started = time.monotonic()
    timings: dict[str, float] = {}
    lines = []
    with subprocess.Popen(
        ["bash", str(GAIA_ENV / "run-local.sh")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        for line in proc.stdout:
            lines.append(line)
            if "Started" in line and "started_s" not in timings:
                timings["started_s"] = time.monotonic() - started
            if "Start mcp server success" in line:
                timings["healthy_s"] = time.monotonic() - started
        rc = proc.wait()
    output = "".join(lines)
    assert rc == 0, output[-4000:]
    return output, timings


@contextlib.contextmanager
def started_container(folder: Path) -> Iterator[Container]:
    """`env/gaia/run-local.sh` in `folder` (the image Docker cached is reused), the container it
    started, and `docker compose down` after; env/gaia/.env as it was before."""
    dot_env = GAIA_ENV / ".env"
    kept = dot_env.read_bytes() if dot_env.exists() else None
    dot_env.unlink(missing_ok=True)
    port, project = free_port(), f"aworld-train-gaia-test-{uuid.uuid4().hex[:8]}"
    env = {
        **compose_env(folder),
        "COMPOSE_PROJECT_NAME": project,
        "GAIA_BASE_IMAGE": base_image(),
        "GAIA_MCP_PORT": str(port),
        "GAIA_DATA_DIR": str(SAMPLE),
        "GAIA_GATEWAY_TOKEN": TOKEN,
        "GAIA_MEMORY_LIMIT": MEMORY,
    }
    if host_ca_bundle():
        env["GAIA_CA_BUNDLE"] = host_ca_bundle()
    try:
        output, timings = run_local(env)
        box = Container(port, project, env, output, timings)
        yield box
    finally:
        down = subprocess.run(
            ["docker", "compose", "-f", str(GAIA_ENV / "docker-compose.yaml"), "down", "--volumes", "--timeout", "10"],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        (folder / "down.log").write_text(down.stdout + down.stderr)
        (GAIA_ENV / "ca" / "ca-bundle.crt").unlink(missing_ok=True)
        dot_env.unlink(missing_ok=True)
        if kept is not None:
            dot_env.write_bytes(kept)
