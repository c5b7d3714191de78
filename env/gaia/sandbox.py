"""One call of the Python an episode's model writes, run under the isolation this machine allows
(isolation.py: bubblewrap's namespaces, or a uid per episode; a seccomp filter and rlimits in
every mode) in the episode's folder (workspaces.py). The call's processes die with it (a pid
namespace, or every process of the episode's uid), the folder's disk quota is checked while the
code runs, and the output is clipped while it is read (call_cleanup.py ends what a call leaves).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from aworld_train.env.gaia.call_cleanup import (
    disk_usage,
    kill_group,
    kill_uid,
    remove_owned_by,
    remove_written_since,
)
from aworld_train.env.gaia.isolation import (
    PRELUDE,
    base_env,
    interpreter,
    namespace_flags,
    seccomp_program,
    system_mounts,
)

FILES_ENV = "GAIA_FILES_DIR"


@dataclass(frozen=True)
class Limits:
    timeout_s: float = float(os.environ.get("GAIA_PYTHON_TIMEOUT_S") or 20)
    memory_mb: int = int(os.environ.get("GAIA_PYTHON_MEMORY_MB") or 1024)
    disk_mb: int = int(os.environ.get("GAIA_PYTHON_DISK_MB") or 256)
    processes: int = int(os.environ.get("GAIA_PYTHON_PROCESSES") or 64)
    open_files: int = 256
    output_chars: int = 10000


@dataclass
class Sandbox:
    mode: str
    limits: Limits
    files_dir: Path | None = None

    def command(self, folder: Path, uid: int | None) -> list[str]:
        limits = self.limits
        rlimits = {
            "RLIMIT_AS": limits.memory_mb * 1024 * 1024,
            "RLIMIT_CPU": int(limits.timeout_s) + 1,
            "RLIMIT_FSIZE": limits.disk_mb * 1024 * 1024,
            "RLIMIT_NOFILE": limits.open_files,
            "RLIMIT_CORE": 0,
        }
        if self.mode != "unsandboxed":
            rlimits["RLIMIT_NPROC"] = limits.processes
        config = {
            "limits": rlimits,
            "uid": uid,
            "seccomp": seccomp_program().hex() if self.mode != "unsandboxed" else "",
            "strict": self.mode != "unsandboxed",
        }
        python = [interpreter(), "-I", "-c", PRELUDE, json.dumps(config)]
        if self.mode != "bwrap":
            return python
        mounts = [*system_mounts(limits.disk_mb * 1024 * 1024), "--bind", str(folder), str(folder)]
        if self.files_dir is not None:
            mounts += ["--ro-bind", str(self.files_dir), str(self.files_dir)]
        return [
            shutil.which("bwrap") or "bwrap",
            *namespace_flags(),
            *mounts,
            "--chdir",
            str(folder),
            "--",
            *python,
        ]

    def env(self, folder: Path) -> dict[str, str]:
        env = {
            **base_env(),
            "HOME": str(folder),
            "TMPDIR": str(folder),
            "PYTHONIOENCODING": "utf-8",
            "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": str(folder),
        }
        if self.files_dir is not None:
            env[FILES_ENV] = str(self.files_dir)
        return env

    async def run(self, code: str, folder: Path, uid: int | None) -> str:
        """Run `code` in `folder` and report exit status, stdout and stderr as text."""
        limits = self.limits
        started = time.time()
        process = await asyncio.create_subprocess_exec(
            *self.command(folder, uid), cwd=folder, env=self.env(folder),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
        out, err = _Clipped(limits.output_chars), _Clipped(limits.output_chars)
        readers = asyncio.gather(out.drain(process.stdout), err.drain(process.stderr))
        stopped = ""
        try:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                process.stdin.write(code.encode("utf-8"))
                await process.stdin.drain()
                process.stdin.close()
            stopped = await self._watch(process, folder, limits)
        finally:
            # The call ends with its main process: whatever it left running goes too, and a
            # daemon that kept the output pipes open no longer holds the answer back.
            kill_group(process.pid)
            await self._end_call(uid)
            if process.returncode is None:
                await process.wait()
            try:
                await asyncio.wait_for(readers, 2.0)
            except asyncio.TimeoutError:
                pass
        if stopped == "disk":
            removed = remove_written_since(folder, started)
            return (
                f"[stopped: the task's folder went over its {limits.disk_mb} MB disk quota; "
                f"the {removed} files this call wrote were removed]"
            )
        if stopped == "time":
            raise TimeoutError(f"the code ran longer than {limits.timeout_s:g}s and was stopped")
        stdout, stderr = out.text(), err.text()
        if process.returncode != 0:
            if process.returncode in (-signal.SIGKILL, -signal.SIGXCPU) or "MemoryError" in stderr:
                stderr += f"\n[stopped: limits are {limits.timeout_s:g}s and {limits.memory_mb} MB]"
            elif "socket" in stderr and "Permission denied" in stderr:
                stderr += "\n[network access is disabled in this sandbox]"
            return f"exit code {process.returncode}\n{stdout}\n[stderr]\n{stderr}".strip()
        return (stdout + (f"\n[stderr]\n{stderr}" if stderr.strip() else "")) or "(no output; use print)"

    async def _watch(self, process, folder: Path, limits: Limits, every_s: float = 0.02) -> str:
        """'' when the call ends by itself, 'time' or 'disk' when it is stopped for a limit.

        Polls the exit status: `Process.wait()` also waits for the output pipes, which a
        daemon the code left behind may hold open."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limits.timeout_s
        quota = limits.disk_mb * 1024 * 1024
        for tick in itertools.count():
            if process.returncode is not None:
                return "disk" if disk_usage(folder) > quota else ""
            if loop.time() >= deadline:
                return "time"
            if tick % 5 == 4 and await asyncio.to_thread(disk_usage, folder) > quota:
                return "disk"
            await asyncio.sleep(every_s)
        return ""

    async def _end_call(self, uid: int | None) -> None:
        """No process of the call outlives it: bwrap's pid namespace ends with it; in uid
        mode every process of the episode's uid is killed (a daemon has left the group)."""
        if self.mode == "uid" and uid is not None:
            await asyncio.to_thread(kill_uid, uid)
            await asyncio.to_thread(remove_owned_by, uid)


class _Clipped:
    """Keeps the first `limit` characters of a stream while reading the rest away."""

    def __init__(self, limit: int) -> None:
        self.limit_bytes = limit * 4  # utf-8: at most 4 bytes a character
        self.limit = limit
        self.kept = bytearray()
        self.dropped = 0

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            room = self.limit_bytes - len(self.kept)
            self.kept += chunk[:room]
            self.dropped += max(0, len(chunk) - room)

    def text(self) -> str:
        text = self.kept.decode("utf-8", "replace")
        if len(text) > self.limit or self.dropped:
            more = len(text[self.limit :].encode("utf-8")) + self.dropped
            return text[: self.limit] + f"\n[truncated: {more} more bytes]"
        return text
