"""Isolation for the Python an episode's model writes.

Three ways to isolate, picked by `GAIA_PYTHON_SANDBOX` (default `auto`: the first that works):

- `bwrap`: bubblewrap puts each call in new mount, pid, network, IPC and UTS namespaces
  that show only the system folders, the interpreter, the episode's folder and the task's
  files (read-only). When the sandbox runs as root, the code also runs as the episode's
  own uid; otherwise bubblewrap adds a user namespace.
- `uid`: no namespaces (Docker's default seccomp profile refuses them) but the sandbox runs
  as root: each episode gets its own unprivileged uid, which owns its folder (mode 0700)
  and can neither read other episodes' folders nor signal or inspect the server.
- `unsandboxed`: no isolation at all, only when asked for by that name.

In every mode a seccomp filter refuses `socket()` (and io_uring), so no code in the call
- `_socket`, ctypes, a new interpreter or curl - can open a network connection, and
rlimits bound memory, CPU, file size and processes. A call's processes die with it
(a pid namespace, or every process of the episode's uid), and the episode's folder has
a disk quota, checked while the code runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import hashlib
import itertools
import json
import os
import platform
import secrets
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

MODE_ENV = "GAIA_PYTHON_SANDBOX"
ROOT_ENV = "GAIA_SANDBOX_ROOT"
SALT_ENV = "GAIA_SANDBOX_SALT"
UIDS_ENV = "GAIA_SANDBOX_UIDS"
FILES_ENV = "GAIA_FILES_DIR"
PYTHON_ENV = "GAIA_SANDBOX_PYTHON"
MODES = ("auto", "bwrap", "uid", "unsandboxed")
DEFAULT_UIDS = (20000, 59999)  # inside the 65536 ids a rootless container maps


class SandboxUnavailable(RuntimeError):
    """The requested isolation cannot work on this machine."""


@dataclass(frozen=True)
class Limits:
    timeout_s: float = float(os.environ.get("GAIA_PYTHON_TIMEOUT_S") or 20)
    memory_mb: int = int(os.environ.get("GAIA_PYTHON_MEMORY_MB") or 1024)
    disk_mb: int = int(os.environ.get("GAIA_PYTHON_DISK_MB") or 256)
    processes: int = int(os.environ.get("GAIA_PYTHON_PROCESSES") or 64)
    open_files: int = 256
    output_chars: int = 10000


# ---- seccomp: a classic-BPF program refusing socket() and io_uring_setup() with EACCES
_ARCHES = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198)}  # audit arch, socket()
_IO_URING_SETUP = 425  # the same number on both


def seccomp_program() -> bytes:
    """The filter's instructions (struct sock_filter, 8 bytes each); other architectures are refused."""
    machine = platform.machine()
    if machine not in _ARCHES:
        raise SandboxUnavailable(f"no seccomp network filter for {machine}; known: {', '.join(_ARCHES)}")
    arch, socket_nr = _ARCHES[machine]
    load, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    allow, deny, kill = 0x7FFF0000, 0x00050000 | errno.EACCES, 0x80000000

    def op(code: int, jt: int, jf: int, k: int) -> bytes:
        return struct.pack("=HBBI", code, jt, jf, k)

    return b"".join([
        op(load, 0, 0, 4),  # seccomp_data.arch
        op(jeq, 1, 0, arch),
        op(ret, 0, 0, kill),  # another ABI (i386 on x86_64): its syscall numbers differ
        op(load, 0, 0, 0),  # seccomp_data.nr
        op(jge, 3, 0, 0x40000000),  # the x32 ABI
        op(jeq, 2, 0, socket_nr),
        op(jeq, 1, 0, _IO_URING_SETUP),
        op(ret, 0, 0, allow),
        op(ret, 0, 0, deny),
    ])  # fmt: skip


# Runs first in the sandboxed interpreter, before any of the model's code: limits, the
# episode's uid, the network filter; then it runs the code read from stdin as __main__.
PRELUDE = r"""
import ctypes, json, os, resource, sys
_c = json.loads(sys.argv[1])
def _fail(what):
    sys.stderr.write("sandbox setup failed: " + what + "\n"); os._exit(97)
for _name, _value in _c["limits"].items():
    resource.setrlimit(getattr(resource, _name), (_value, _value))
if _c["uid"] is not None:
    os.setgroups([]); os.setgid(_c["uid"]); os.setuid(_c["uid"])
    if os.getuid() != _c["uid"] or os.geteuid() != _c["uid"]:
        _fail("uid")
os.umask(0o077)
_libc = ctypes.CDLL(None, use_errno=True)
_prog = ctypes.create_string_buffer(bytes.fromhex(_c["seccomp"]))
class _FProg(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
_fprog = _FProg(len(_c["seccomp"]) // 16, ctypes.addressof(_prog))
_zero = ctypes.c_ulong(0)
if (_libc.prctl(38, ctypes.c_ulong(1), _zero, _zero, _zero) != 0
        or _libc.prctl(22, ctypes.c_ulong(2), ctypes.byref(_fprog), _zero, _zero) != 0):
    if _c["strict"]:
        _fail("seccomp: " + os.strerror(ctypes.get_errno()))
_code = sys.stdin.read()
sys.stdin.close()
sys.stdin = open(os.devnull)
sys.argv = [""]
import linecache, __main__
linecache.cache["<code>"] = (len(_code), None, _code.splitlines(True), "<code>")
def _run(code, scope):
    for name in [n for n in scope if n not in ("__name__", "__doc__", "__builtins__", "__spec__", "__loader__")]:
        del scope[name]
    exec(code, scope)
_run(compile(_code, "<code>", "exec"), vars(__main__))
"""


# ---- choosing the isolation
def _bwrap_works(bwrap: str) -> bool:
    """Whether bubblewrap can make its namespaces here (Docker's default profile refuses)."""
    try:
        probe = subprocess.run(
            [bwrap, *_namespace_flags(), *_system_mounts(1 << 20), "--", interpreter(), "-I", "-c", "pass"],
            capture_output=True, timeout=20, env=_base_env(),
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def choose_mode(requested: str | None = None, bwrap: str | None = "", root: bool | None = None) -> str:
    """The isolation to use, or SandboxUnavailable saying what to install or set.

    `bwrap` (its path, None for none) and `root` default to what this machine has."""
    requested = (requested or os.environ.get(MODE_ENV) or "auto").strip()
    if requested not in MODES:
        raise SandboxUnavailable(
            f"{MODE_ENV}={requested!r} is not a sandbox mode; use one of {', '.join(MODES)}"
        )
    if requested == "unsandboxed":
        return requested
    seccomp_program()  # raises on an architecture without a filter
    bwrap = shutil.which("bwrap") if bwrap == "" else bwrap
    root = os.geteuid() == 0 if root is None else root
    if requested in ("auto", "bwrap") and bwrap and _bwrap_works(bwrap):
        return "bwrap"
    if requested == "bwrap":
        raise SandboxUnavailable(
            f"{MODE_ENV}=bwrap but bubblewrap "
            + ("cannot create namespaces here" if bwrap else "is not installed (apt-get install bubblewrap)")
        )
    if root:
        _check_uid_interpreter()
        return "uid"
    raise SandboxUnavailable(
        "the python tool cannot isolate code here: bubblewrap is "
        + ("refused namespaces" if bwrap else "not installed (apt-get install bubblewrap)")
        + " and the server is not root (so it cannot run each episode as its own uid). "
        f"Install bubblewrap, run the gateway as root (its Docker image does), or set "
        f"{MODE_ENV}=unsandboxed to run model code with this server's rights."
    )


def _check_uid_interpreter() -> None:
    """In uid mode the interpreter must be readable by any user (pyenv under /root is not)."""
    python = interpreter()
    try:
        probe = subprocess.run(
            [python, "-I", "-c", "import linecache, json, ctypes"], capture_output=True, text=True,
            timeout=30, env=_base_env(), user=DEFAULT_UIDS[1], group=DEFAULT_UIDS[1], extra_groups=[],
        )  # fmt: skip
        failure = probe.stderr.strip()[-200:] if probe.returncode != 0 else None
    except OSError as exc:  # the user may not even reach the file (a folder on its path is private)
        failure = str(exc)
    if failure is not None:
        raise SandboxUnavailable(
            f"uid mode: {python} cannot be run by an unprivileged user ({failure}); "
            f"set {PYTHON_ENV} to an interpreter every user can read, e.g. /usr/bin/python3, "
            "or install bubblewrap"
        )


def _namespace_flags() -> list[str]:
    flags = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    if os.geteuid() != 0:  # root makes namespaces itself; others need a user namespace for them
        flags.append("--unshare-user")
    return [*flags, "--die-with-parent", "--new-session"]


def interpreter() -> str:
    """The Python that runs model code: `$GAIA_SANDBOX_PYTHON` (one with the libraries tasks
    need, readable by every user), else the server's own."""
    return os.environ.get(PYTHON_ENV) or sys.executable


@functools.cache
def interpreter_prefixes(python: str) -> tuple[str, ...]:
    """The folders `python` loads from (a venv and the install it points to)."""
    try:
        out = subprocess.run(
            [python, "-I", "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
            capture_output=True, text=True, timeout=30, env=_base_env(), check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxUnavailable(f"{PYTHON_ENV}={python!r} does not run: {exc}") from None
    found = [os.path.realpath(python), *out.split()]
    return tuple(dict.fromkeys(str(Path(p).parent.parent) if i == 0 else p for i, p in enumerate(found)))


def _system_mounts(tmp_bytes: int) -> list[str]:
    """Read-only system folders, a private /tmp and /dev/shm of `tmp_bytes` each, then the
    interpreter; nothing of the server's own files. The interpreter comes after the private
    /tmp, which would otherwise hide a virtual environment that lives under /tmp."""
    args: list[str] = []
    for path in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc"):
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    size = str(tmp_bytes)
    args += ["--proc", "/proc", "--dev", "/dev", "--size", size, "--tmpfs", "/tmp", "--size", size]
    args += ["--tmpfs", "/dev/shm"]
    made: set[str] = set()
    for prefix in interpreter_prefixes(interpreter()):
        if prefix.startswith(("/usr/", "/bin/", "/lib")) or prefix in ("/usr", "/"):
            continue
        # bwrap makes missing parents 0700 as root: the episode's uid could not pass them.
        for parent in reversed(Path(prefix).parents[:-1]):
            if str(parent) not in made:
                made.add(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", prefix, prefix]
    return args


def _base_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH") or "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


# ---- episode folders
class Workspaces:
    """One folder per episode under `root`, named by a salted hash of the episode id.

    With the same root and salt (the gateway passes both), a restarted server finds every
    episode's folder again. In root modes each folder is owned by the episode's own uid,
    which is read back from the folder after a restart.
    """

    def __init__(self, root: Path, salt: str, per_episode_uid: bool, uids: tuple[int, int] = DEFAULT_UIDS,
                 capacity: int = 4096) -> None:  # fmt: skip
        self.root = root
        self.salt = salt
        self.per_episode_uid = per_episode_uid
        self.uids = uids
        self.capacity = capacity
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)  # uids may enter their own folder but not list the others
        self._folders: OrderedDict[str, tuple[Path, int | None]] = OrderedDict()
        self._used = (
            {p.stat().st_uid for p in self.root.iterdir() if p.is_dir()} if per_episode_uid else set()
        )

    def name(self, episode: str) -> str:
        return folder_name(self.salt, episode)

    def folder(self, episode: str) -> tuple[Path, int | None]:
        """(the episode's folder, the uid its code runs as; None when it keeps the server's)."""
        known = self._folders.get(episode)
        if known is not None and known[0].is_dir():
            self._folders.move_to_end(episode)
            return known
        path = self.root / self.name(episode)
        uid: int | None = None
        if path.is_dir():
            uid = path.stat().st_uid if self.per_episode_uid else None
        else:
            path.mkdir(mode=0o700)
            if self.per_episode_uid:
                uid = self._free_uid()
                os.chown(path, uid, uid)
        self._folders[episode] = (path, uid)
        while len(self._folders) > self.capacity:
            _, (old, old_uid) = self._folders.popitem(last=False)
            shutil.rmtree(old, ignore_errors=True)
            self._used.discard(old_uid)
        return path, uid

    def _free_uid(self) -> int:
        low, high = self.uids
        if len(self._used) >= high - low + 1:
            raise RuntimeError(f"all sandbox uids {low}-{high} are in use; widen {UIDS_ENV}")
        while True:
            uid = low + secrets.randbelow(high - low + 1)
            if uid not in self._used:
                self._used.add(uid)
                return uid


def folder_name(salt: str, episode: str) -> str:
    return hashlib.sha256(f"{salt}:{episode}".encode()).hexdigest()[:24]


def parse_uids(value: str | None) -> tuple[int, int]:
    if not value:
        return DEFAULT_UIDS
    try:
        low, high = (int(part) for part in value.split("-"))
    except ValueError:
        raise SandboxUnavailable(f"{UIDS_ENV}={value!r}: write a range like 20000-59999") from None
    if not 0 < low <= high:
        raise SandboxUnavailable(f"{UIDS_ENV}={value!r}: the range must be positive and ascending")
    return low, high


# ---- running one call
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
        mounts = [*_system_mounts(limits.disk_mb * 1024 * 1024), "--bind", str(folder), str(folder)]
        if self.files_dir is not None:
            mounts += ["--ro-bind", str(self.files_dir), str(self.files_dir)]
        return [
            shutil.which("bwrap") or "bwrap",
            *_namespace_flags(),
            *mounts,
            "--chdir",
            str(folder),
            "--",
            *python,
        ]

    def env(self, folder: Path) -> dict[str, str]:
        env = {
            **_base_env(),
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
            with_suppress_kill(process.pid)
            await self._end_call(uid)
            if process.returncode is None:
                await process.wait()
            try:
                await asyncio.wait_for(readers, 2.0)
            except asyncio.TimeoutError:
                pass
        if stopped == "disk":
            removed = _remove_written_since(folder, started)
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


def with_suppress_kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid`: a child that takes the uid and signals -1."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            for _ in range(3):  # a fork bomb may still be spawning
                os.kill(-1, signal.SIGKILL)
        except BaseException:
            pass
        os._exit(0)
    os.waitpid(pid, 0)


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


def disk_usage(folder: Path) -> int:
    """Bytes allocated under `folder` (blocks, so sparse files count as what they use)."""
    total = 0
    stack = [str(folder)]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    try:
                        stat = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += stat.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return total


def _remove_written_since(folder: Path, since: float) -> int:
    removed = 0
    for path in sorted(folder.rglob("*"), reverse=True):
        try:
            if path.is_symlink() or path.is_file():
                if path.lstat().st_mtime >= since:
                    path.unlink()
                    removed += 1
            elif path.is_dir() and path.stat().st_mtime >= since and not any(path.iterdir()):
                path.rmdir()
        except OSError:
            continue
    return removed


SHARED_TMP = ("/tmp", "/var/tmp", "/dev/shm")


def remove_owned_by(uid: int, folders: tuple[str, ...] = SHARED_TMP) -> None:
    """Without a mount namespace an episode's uid can write the shared temp folders: what
    it left there goes when its call ends, so it neither fills them nor passes notes."""
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
            except OSError:
                continue
