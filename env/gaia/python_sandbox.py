"""Python sandbox MCP server: runs code in a child process with time and memory limits,
no network, and one working folder per episode.

Isolation is per process and per folder: each episode (the `X-Episode-Id` header) gets
its own folder with an unguessable name, the child starts there with `HOME` and
`TMPDIR` pointing into it, and `list_files` shows only that folder. The network is cut
with a user+network namespace (`unshare -rn`) where the kernel allows it, and always
by a prelude that disables sockets. This keeps episodes apart; for untrusted code run
the gateway in its Docker image, which is the security boundary.

Run: `aworld-train env up gaia-python [--port N]`.
"""
# No `from __future__ import annotations` here: FastMCP reads the real annotations.

import asyncio
import atexit
import hashlib
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from mcp.server.fastmcp import Context, FastMCP

from aworld_train.env.episode import episode_of
from aworld_train.env.mcp_fixes import contain_session_errors

MAX_OUTPUT_CHARS = 10000
# Runs before the user's code: any socket use raises, also where no namespace is available.
NO_NETWORK_PRELUDE = """
import socket as _s
def _no_network(*_a, **_k):
    raise OSError("network access is disabled in this sandbox")
_s.socket.connect = _s.socket.connect_ex = _s.socket.bind = _no_network
_s.create_connection = _s.getaddrinfo = _no_network
del _s, _no_network
"""


@dataclass(frozen=True)
class Limits:
    timeout_s: float = float(os.environ.get("GAIA_PYTHON_TIMEOUT_S") or 20)
    memory_mb: int = int(os.environ.get("GAIA_PYTHON_MEMORY_MB") or 1024)
    max_file_mb: int = 64


def _namespace_prefix() -> list[str]:
    """`unshare -rn` where this kernel lets an unprivileged process drop its network."""
    unshare = shutil.which("unshare")
    if not unshare:
        return []
    try:
        probe = subprocess.run([unshare, "-rn", "true"], capture_output=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [unshare, "-rn"] if probe.returncode == 0 else []


class Workspaces:
    """One folder per episode under a private root; the oldest are removed past `capacity`."""

    def __init__(self, root: Path | None = None, capacity: int = 2000) -> None:
        if root is None:
            root = Path(tempfile.mkdtemp(prefix="gaia-sandbox-"))
            atexit.register(shutil.rmtree, root, True)
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self._salt = secrets.token_hex(16)
        self._folders: OrderedDict[str, Path] = OrderedDict()
        self._capacity = capacity

    def folder(self, episode: str) -> Path:
        if episode in self._folders:
            self._folders.move_to_end(episode)
            return self._folders[episode]
        name = hashlib.sha256(f"{self._salt}:{episode}".encode()).hexdigest()[:24]
        path = self.root / name
        path.mkdir(mode=0o700, exist_ok=True)
        self._folders[episode] = path
        while len(self._folders) > self._capacity:
            _, old = self._folders.popitem(last=False)
            shutil.rmtree(old, ignore_errors=True)
        return path


def _limit_child(limits: Limits):
    def apply() -> None:
        memory = limits.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        cpu = int(limits.timeout_s) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        size = limits.max_file_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return apply


def _clip(text: str) -> str:
    if len(text) <= MAX_OUTPUT_CHARS:
        return text
    return text[:MAX_OUTPUT_CHARS] + f"\n[truncated: {len(text) - MAX_OUTPUT_CHARS} more characters]"


async def run_code(code: str, folder: Path, limits: Limits, prefix: list[str]) -> str:
    """Run `code` in `folder` and report exit status, stdout and stderr as text."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(folder),
        "TMPDIR": str(folder),
        "PYTHONIOENCODING": "utf-8",
        "MPLBACKEND": "Agg",
    }
    process = await asyncio.create_subprocess_exec(
        *prefix, sys.executable, "-I", "-",  # the program comes on stdin: no file in the folder
        cwd=folder, env=env, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        preexec_fn=_limit_child(limits), start_new_session=True,
    )  # fmt: skip
    try:
        program = (NO_NETWORK_PRELUDE + "\n" + code).encode("utf-8")
        stdout, stderr = await asyncio.wait_for(process.communicate(program), limits.timeout_s)
    except asyncio.TimeoutError:
        os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        raise TimeoutError(f"the code ran longer than {limits.timeout_s:g}s and was stopped") from None
    out, err = stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace")
    if process.returncode != 0:
        if process.returncode in (-signal.SIGKILL, -signal.SIGXCPU) or "MemoryError" in err:
            err += f"\n[stopped: limits are {limits.timeout_s:g}s and {limits.memory_mb} MB]"
        return _clip(f"exit code {process.returncode}\n{out}\n[stderr]\n{err}".strip())
    return _clip(out + (f"\n[stderr]\n{err}" if err.strip() else "")) or "(no output; use print)"


def build_server(host: str = "127.0.0.1", port: int = 0, limits: Limits | None = None) -> FastMCP:
    contain_session_errors()
    server = FastMCP("python", host=host, port=port)
    limits = limits or Limits()
    workspaces = Workspaces()
    prefix = _namespace_prefix()

    @server.tool()
    async def run_python(code: str, ctx: Context) -> str:
        """Run Python 3 code and return what it prints. Files it writes stay for this task's later calls.
        The network is off."""
        return await run_code(code, workspaces.folder(episode_of(ctx)), limits, prefix)

    @server.tool()
    def list_files(ctx: Context) -> str:
        """List the files written by this task's earlier run_python calls."""
        folder = workspaces.folder(episode_of(ctx))
        names = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        return "\n".join(names) or "(no files yet)"

    return server


def serve(transport: str = "http", host: str = "127.0.0.1", port: int = 8767) -> None:
    build_server(host, port).run(transport="streamable-http" if transport == "http" else "stdio")
