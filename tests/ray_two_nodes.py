"""Two Ray nodes on this machine, each in its own network namespace (so 127.0.0.1 differs between
them), joined by a veth pair: the head at 10.77.0.1, the second node at 10.77.0.2. For the tests
of runs that join a cluster. Needs root, `ip` and Ray; `available()` says why not.

Processes are stopped by namespace (`ip netns pids`), never with `ray stop`, which would stop
every Ray process on the machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HEAD_IP, NODE_IP, PORT = "10.77.0.1", "10.77.0.2", 6379
RAY = str(Path(sys.executable).with_name("ray"))
# Ray 2.60 asks for an auth token between nodes unless told otherwise; these are test nodes
ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


def available() -> str | None:
    """None if two namespaced nodes can run here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    if not Path(RAY).exists():
        return "no ray executable beside this Python"
    return None


def _sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, capture_output=True, text=True)


@dataclass
class Cluster:
    head_ns: str
    node_ns: str
    temp_dirs: list[Path] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"{HEAD_IP}:{PORT}"

    def run_in_head(self, command: list[str]) -> list[str]:
        """`command` as run inside the head's namespace."""
        return ["ip", "netns", "exec", self.head_ns, "env", *(f"{k}={v}" for k, v in ENV.items()), *command]

    def stop(self) -> None:
        for ns in (self.node_ns, self.head_ns):
            for sig in ("-TERM", "-KILL"):
                pids = _sh("ip", "netns", "pids", ns, check=False).stdout.split()
                if pids:
                    _sh("kill", sig, *pids, check=False)
                    time.sleep(2)
            _sh("ip", "netns", "delete", ns, check=False)
        for temp in self.temp_dirs:
            shutil.rmtree(temp, ignore_errors=True)


def start(node_env: dict[str, str] | None = None) -> Cluster:
    """The two namespaces, linked, and a Ray node in each (the head with one logical GPU: the
    CPU trainer's worker slot). `node_env` is added to both nodes' `ray start` environment."""
    tag = f"awt{os.getpid() % 100000}"
    cluster = Cluster(f"{tag}a", f"{tag}b")
    cluster.stop()  # a namespace left by an earlier, killed session
    veth_a, veth_b = f"{tag}va", f"{tag}vb"
    _sh("ip", "link", "delete", veth_a, check=False)
    for ns in (cluster.head_ns, cluster.node_ns):
        _sh("ip", "netns", "add", ns)
    _sh("ip", "link", "add", veth_a, "type", "veth", "peer", "name", veth_b)
    for ns, veth, ip in ((cluster.head_ns, veth_a, HEAD_IP), (cluster.node_ns, veth_b, NODE_IP)):
        _sh("ip", "link", "set", veth, "netns", ns)
        _sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{ip}/24", "dev", veth)
        _sh("ip", "netns", "exec", ns, "ip", "link", "set", veth, "up")
        _sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
    env = {**os.environ, **ENV, **(node_env or {})}
    # logical CPUs to spare: verl places agent-loop workers with a soft node affinity, which a busy
    # node turns into a place on the other one
    common = ["--disable-usage-stats", "--num-cpus=64"]
    try:
        for ns, extra in (
            (
                cluster.head_ns,
                [
                    "--head",
                    f"--node-ip-address={HEAD_IP}",
                    f"--port={PORT}",
                    "--num-gpus=1",
                    "--include-dashboard=false",
                ],
            ),
            (cluster.node_ns, [f"--address={HEAD_IP}:{PORT}", f"--node-ip-address={NODE_IP}"]),
        ):
            temp = Path(tempfile.mkdtemp(prefix=f"{ns}-", dir="/tmp"))  # Ray's socket paths must stay short
            cluster.temp_dirs.append(temp)
            subprocess.run(
                ["ip", "netns", "exec", ns, RAY, "start", *extra, *common, f"--temp-dir={temp}"],
                check=True,
                capture_output=True,
                text=True,
                env=env,
                timeout=180,
            )
    except subprocess.CalledProcessError as exc:
        cluster.stop()
        raise RuntimeError(f"ray start failed: {exc.stderr[-2000:]}") from None
    return cluster
