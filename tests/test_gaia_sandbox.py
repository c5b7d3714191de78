"""The GAIA python sandbox against the escapes that matter, in each isolation this machine has:
bubblewrap (namespaces) and a uid per episode (no namespaces, as under Docker's default
seccomp profile). Each probe is real code run through the real sandbox."""

import asyncio
import os
import shutil
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from aworld_train.env.gaia import isolation
from aworld_train.env.gaia.call_cleanup import disk_usage
from aworld_train.env.gaia.isolation import SandboxUnavailable, choose_mode
from aworld_train.env.gaia.sandbox import Limits, Sandbox
from aworld_train.env.gaia.workspaces import Workspaces

ROOT = Path(__file__).resolve().parents[1]
IS_ROOT = os.geteuid() == 0


def _uid_interpreter() -> str | None:
    """An interpreter an unprivileged uid can run (pyenv under a 0700 /root is not one)."""
    for python in (sys.executable, "/usr/bin/python3"):
        try:
            os.environ[isolation.PYTHON_ENV] = python
            isolation._check_uid_interpreter()
            return python
        except (SandboxUnavailable, OSError):
            continue
        finally:
            os.environ.pop(isolation.PYTHON_ENV, None)
    return None


def _modes() -> list:
    bwrap = shutil.which("bwrap")
    return [
        pytest.param(
            "bwrap",
            marks=pytest.mark.skipif(not bwrap or not isolation._bwrap_works(bwrap), reason="no bubblewrap"),
        ),
        pytest.param("uid", marks=pytest.mark.skipif(not IS_ROOT, reason="uid mode needs root")),
    ]


class Box:
    """A sandbox in one mode, with episodes' folders under a private root."""

    def __init__(self, mode: str, root: Path, **limits) -> None:
        self.workspaces = Workspaces(root, "salt", per_episode_uid=IS_ROOT)
        self.sandbox = Sandbox(mode, Limits(timeout_s=15, **limits), None)

    def run(self, episode: str, code: str) -> str:
        folder, uid = self.workspaces.folder(episode)
        return asyncio.run(self.sandbox.run(code, folder, uid))


@pytest.fixture(params=_modes())
def box(request, tmp_path, monkeypatch):
    if request.param == "uid":
        python = _uid_interpreter()
        if python is None:
            pytest.skip("no interpreter an unprivileged uid can run")
        monkeypatch.setenv(isolation.PYTHON_ENV, python)
    isolation.interpreter_prefixes.cache_clear()
    yield Box(request.param, tmp_path / "episodes", disk_mb=64, processes=32)
    isolation.interpreter_prefixes.cache_clear()


def test_an_episode_cannot_list_or_read_another_episodes_folder(box):
    box.run("a", "open('secret.txt', 'w').write('from a')")
    other, _ = box.workspaces.folder("a")
    probe = f"""
import glob, os
print('glob', glob.glob('../*'), glob.glob('../*/*'))
for try_ in (lambda: os.listdir('..'), lambda: open({str(other / "secret.txt")!r}).read()):
    try:
        print('read', try_())
    except OSError as exc:
        print('denied', type(exc).__name__)
"""
    out = box.run("b", probe)
    assert "from a" not in out and "secret" not in out, out
    assert out.count("denied") == 2 or ("glob [] []" in out and "from a" not in out), out


def test_code_cannot_read_or_write_the_servers_files(box, tmp_path):
    private = tmp_path / "gateway-state"
    private.mkdir(mode=0o700)
    (private / "servers.yaml").write_text("token: s3cret")
    (private / "servers.yaml").chmod(0o600)
    source = ROOT / "env" / "gaia" / "sandbox.py"
    probe = f"""
import os
for path in ({str(private / "servers.yaml")!r}, os.path.expanduser('~root/.ssh/id_rsa'), '/root/.ssh'):
    try:
        print('read', open(path).read() if os.path.isfile(path) else os.listdir(path))
    except OSError as exc:
        print('denied', type(exc).__name__)
try:
    open({str(source)!r}, 'a').write('# changed')
    print('wrote source')
except OSError as exc:
    print('denied', type(exc).__name__)
"""
    out = box.run("files", probe)
    assert "s3cret" not in out and "wrote source" not in out and "read" not in out, out
    assert out.count("denied") == 4, out
    assert not source.read_text().endswith("# changed")


def test_code_cannot_read_the_servers_environment(box, monkeypatch):
    monkeypatch.setenv("GAIA_GATEWAY_TOKEN", "token-that-must-not-leak")
    probe = f"""
import os
print('env', 'GAIA_GATEWAY_TOKEN' in os.environ)
for pid in (os.getppid(), {os.getpid()}, 1):
    try:
        print('environ', open(f'/proc/{{pid}}/environ', 'rb').read())
    except OSError as exc:
        print('denied', type(exc).__name__)
"""
    out = box.run("env", probe)
    assert "token-that-must-not-leak" not in out and "env False" in out, out


@pytest.fixture
def listener():
    """A real TCP server on loopback that records whether anything connected."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    connected: list = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connected.append(server.accept())
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], connected
    stop.set()
    thread.join()
    server.close()


BYPASSES = {
    "socket": "import socket\nsocket.create_connection(('127.0.0.1', PORT), timeout=2)",
    "_socket": "import _socket\ns = _socket.socket()\ns.connect(('127.0.0.1', PORT))",
    "reload": "import importlib, socket\nimportlib.reload(socket)\nsocket.create_connection(('127.0.0.1', PORT), timeout=2)",
    "ctypes": """
import ctypes, struct
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.socket(2, 1, 0)
addr = struct.pack('!HH4s8x', 2, PORT, bytes([127, 0, 0, 1]))
addr = struct.pack('=H', 2) + addr[2:]
rc = libc.connect(fd, addr, len(addr)) if fd >= 0 else -1
assert fd >= 0 and rc == 0, ('blocked', fd, rc, ctypes.get_errno())
""",
    "new python": "import subprocess, sys\nsubprocess.run([sys.executable, '-c', \"import socket; socket.create_connection(('127.0.0.1', PORT), timeout=2)\"], check=True)",
    "curl": "import subprocess\nsubprocess.run(['curl', '-sS', '--max-time', '2', 'http://127.0.0.1:PORT/'], check=True)",
}


@pytest.mark.parametrize("bypass", sorted(BYPASSES))
def test_every_network_bypass_is_blocked(box, listener, bypass):
    port, connected = listener
    if bypass == "curl" and not shutil.which("curl"):
        pytest.skip("curl is not installed")
    out = box.run(f"net-{bypass}", BYPASSES[bypass].replace("PORT", str(port)))
    time.sleep(0.3)
    assert connected == [], f"{bypass} reached the listener: {out}"
    assert out.startswith("exit code"), out


def test_a_fork_bomb_stops_at_the_process_limit(box):
    probe = """
import os, time
children = 0
try:
    for _ in range(200):
        if os.fork() == 0:
            time.sleep(3)
            os._exit(0)
        children += 1
except OSError as exc:
    print('stopped after', children, exc.errno)
"""
    out = box.run("fork", probe)
    assert "stopped after" in out, out
    assert int(out.split("stopped after")[1].split()[0]) < 32


def test_the_disk_quota_stops_a_large_write_and_removes_it(box):
    started = time.monotonic()
    out = box.run(
        "disk",
        "chunk = b'x' * 2**20\nwith open('big.bin', 'wb') as f:\n    for _ in range(2048):\n        f.write(chunk)",
    )
    assert "disk quota" in out or "File size limit" in out or "exit code" in out, out
    folder, _ = box.workspaces.folder("disk")
    assert disk_usage(folder) <= 64 * 2**20
    assert time.monotonic() - started < 15
    many = box.run(
        "disk2", "for i in range(200):\n    open(f'f{i}.bin', 'wb').write(b'x' * 2**20)\nprint('wrote all')"
    )
    assert "wrote all" not in many and "disk quota" in many, many
    folder, _ = box.workspaces.folder("disk2")
    assert disk_usage(folder) <= 64 * 2**20


def test_no_process_outlives_its_call(box):
    folder, _ = box.workspaces.folder("daemon")
    probe = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(2)
        open('daemon-was-here', 'w').write('x')
        os._exit(0)
    os._exit(0)
print('parent done')
"""
    assert "parent done" in box.run("daemon", probe)
    time.sleep(3)
    assert not (folder / "daemon-was-here").exists()


def test_killing_the_parent_harms_only_the_call(box):
    out = box.run("kill", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('sent')")
    assert "sent" in out or "exit code" in out
    assert box.run("kill", "print('still here')").strip() == "still here"


def test_output_is_clipped_while_reading(box):
    out = box.run("out", "import sys\nsys.stdout.write('y' * 100_000_000)")
    assert len(out) < 20_000 and "[truncated: 99990000 more bytes]" in out, out[-200:]


def test_refuses_without_isolation_unless_asked_by_name(tmp_path):
    with pytest.raises(SandboxUnavailable, match="GAIA_PYTHON_SANDBOX=unsandboxed"):
        choose_mode("auto", bwrap=None, root=False)
    with pytest.raises(SandboxUnavailable, match="bubblewrap is not installed"):
        choose_mode("bwrap", bwrap=None, root=True)
    with pytest.raises(SandboxUnavailable, match="not a sandbox mode"):
        choose_mode("off")
    assert choose_mode("unsandboxed", bwrap=None, root=False) == "unsandboxed"


def test_the_server_refuses_to_start_when_its_isolation_is_missing(tmp_path):
    import subprocess

    bin_dir = tmp_path / "bin"  # a PATH with no bwrap on it
    bin_dir.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "aworld_train.env", "gaia-python", "--port", "0"],
        env={"PATH": str(bin_dir), "GAIA_PYTHON_SANDBOX": "bwrap", "HOME": str(tmp_path)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert "python sandbox not started" in result.stderr and "bubblewrap is not installed" in result.stderr
