"""How the Python an episode's model writes is isolated: the mode this machine allows, and
what each mode sets up (sandbox.py runs one call under it).

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
rlimits bound memory, CPU, file size and processes (`PRELUDE`, run before the model's code).
"""

from __future__ import annotations

import errno
import functools
import os
import platform
import shutil
import struct
import subprocess
import sys
from pathlib import Path

MODE_ENV = "GAIA_PYTHON_SANDBOX"
PYTHON_ENV = "GAIA_SANDBOX_PYTHON"
UIDS_ENV = "GAIA_SANDBOX_UIDS"
MODES = ("auto", "bwrap", "uid", "unsandboxed")
DEFAULT_UIDS = (20000, 59999)  # uid mode's episode uids: inside the 65536 ids a rootless container maps


class SandboxUnavailable(RuntimeError):
    """The requested isolation cannot work on this machine."""


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
            [bwrap, *namespace_flags(), *system_mounts(1 << 20), "--", interpreter(), "-I", "-c", "pass"],
            capture_output=True, timeout=20, env=base_env(),
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
            timeout=30, env=base_env(), user=DEFAULT_UIDS[1], group=DEFAULT_UIDS[1], extra_groups=[],
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


def namespace_flags() -> list[str]:
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
            capture_output=True, text=True, timeout=30, env=base_env(), check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxUnavailable(f"{PYTHON_ENV}={python!r} does not run: {exc}") from None
    found = [os.path.realpath(python), *out.split()]
    return tuple(dict.fromkeys(str(Path(p).parent.parent) if i == 0 else p for i, p in enumerate(found)))


def system_mounts(tmp_bytes: int) -> list[str]:
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


def base_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH") or "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
