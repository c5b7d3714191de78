"""Python sandbox MCP server: runs an episode's code in isolation (see `sandbox.py`), one
folder per episode (the `X-Episode-Id` header), with time, memory, process and disk limits.

The gateway gives it a folder root and a salt (`GAIA_SANDBOX_ROOT`, `GAIA_SANDBOX_SALT`),
so a restarted server finds every episode's files again; run alone, it makes a private
root and removes it when it exits. It refuses to start where code cannot be isolated,
unless `GAIA_PYTHON_SANDBOX=unsandboxed` says to run code with the server's own rights.

Run: `aworld-train env up gaia-python [--port N]`.
"""
# No `from __future__ import annotations` here: FastMCP reads the real annotations.

import asyncio
import atexit
import logging
import os
import secrets
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from mcp.server.fastmcp import Context, FastMCP

from aworld_train.env.episode import episode_of
from aworld_train.env.gaia.isolation import UIDS_ENV, SandboxUnavailable, choose_mode
from aworld_train.env.gaia.sandbox import FILES_ENV, Limits, Sandbox
from aworld_train.env.gaia.workspaces import ROOT_ENV, SALT_ENV, Workspaces, parse_uids
from aworld_train.env.mcp_fixes import contain_session_errors, settings_from_env

WORKERS_ENV = "GAIA_PYTHON_WORKERS"
QUEUE_ENV = "GAIA_PYTHON_QUEUE"
log = logging.getLogger("aworld_train.gaia.python")


class Busy(RuntimeError):
    pass


class Runner:
    """At most `workers` calls run at once; past `queue` waiting, a call is answered busy."""

    def __init__(self, sandbox: Sandbox, workspaces: Workspaces, workers: int, queue: int) -> None:
        self.sandbox = sandbox
        self.workspaces = workspaces
        self._slots = asyncio.Semaphore(workers)
        self._waiting = 0
        self._queue = queue

    async def run(self, episode: str, code: str) -> str:
        if not episode:
            raise ValueError("no X-Episode-Id header: every call must name its episode")
        if self._waiting >= self._queue:
            raise Busy(f"the python server is busy ({self._waiting} calls waiting); try again shortly")
        self._waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
        try:
            folder, uid = self.workspaces.folder(episode)
            return await self.sandbox.run(code, folder, uid)
        finally:
            self._slots.release()

    def list_files(self, episode: str) -> str:
        if not episode:
            raise ValueError("no X-Episode-Id header: every call must name its episode")
        folder, _ = self.workspaces.folder(episode)
        names = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        return "\n".join(names) or "(no files yet)"


def _workspace_root() -> tuple[Path, str]:
    """The gateway's root and salt, or a private root that goes when this process does."""
    root, salt = os.environ.get(ROOT_ENV), os.environ.get(SALT_ENV)
    if root and salt:
        parent = os.getppid()
        # The gateway removes its root when it stops; if it was killed outright, this
        # server (ended by its parent-death signal) removes it. A restart keeps it.
        atexit.register(lambda: os.getppid() != parent and shutil.rmtree(root, ignore_errors=True))
        return Path(root), salt
    private = Path(tempfile.mkdtemp(prefix="gaia-sandbox-"))
    atexit.register(shutil.rmtree, private, True)
    return private, secrets.token_hex(16)


def build_runner(limits: Limits | None = None, mode: str | None = None) -> Runner:
    mode = choose_mode(mode)
    if mode == "unsandboxed":
        log.warning("GAIA python sandbox is OFF: model code runs with this server's rights")
    root, salt = _workspace_root()
    files = os.environ.get(FILES_ENV)
    files_dir = Path(files.split(os.pathsep)[0]).resolve() if files else None
    per_uid = mode in ("bwrap", "uid") and os.geteuid() == 0
    workspaces = Workspaces(root, salt, per_uid, parse_uids(os.environ.get(UIDS_ENV)))
    workers = int(os.environ.get(WORKERS_ENV) or max(4, 2 * (os.cpu_count() or 1)))
    queue = int(os.environ.get(QUEUE_ENV) or 4096)
    return Runner(Sandbox(mode, limits or Limits(), files_dir), workspaces, workers, queue)


def build_server(host: str = "127.0.0.1", port: int = 0, runner: Runner | None = None) -> FastMCP:
    contain_session_errors()
    server = FastMCP("python", host=host, port=port, **settings_from_env())
    runner = runner or build_runner()

    @server.tool()
    async def run_python(code: str, ctx: Context) -> str:
        """Run Python 3 code and return what it prints. Files it writes in the working folder stay
        for this task's later calls; the task's attached files are under $GAIA_FILES_DIR. The network is off."""
        return await runner.run(episode_of(ctx), code)

    @server.tool()
    def list_files(ctx: Context) -> str:
        """List the files written by this task's earlier run_python calls."""
        return runner.list_files(episode_of(ctx))

    return server


def serve(transport: str = "http", host: str = "127.0.0.1", port: int = 8767) -> None:
    try:
        runner = build_runner()
    except SandboxUnavailable as exc:
        raise SystemExit(f"python sandbox not started: {exc}") from None
    # which isolation this machine allowed (bwrap where namespaces may be made, else per-episode uids)
    print(f"python sandbox: {runner.sandbox.mode}", file=sys.stderr, flush=True)
    if sys.version_info < (3, 12) and hasattr(os, "pidfd_open"):
        # Python 3.11 waits for each child in a thread of its own; a pidfd on the event loop
        # is cheaper (and what 3.12 does by default).
        asyncio.set_child_watcher(asyncio.PidfdChildWatcher())
    # SIGTERM (the gateway stopping it, or its parent-death signal) ends it through atexit.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(SystemExit(0)))
    build_server(host, port, runner).run(transport="streamable-http" if transport == "http" else "stdio")
