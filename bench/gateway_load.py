"""GAIA gateway under load: N concurrent episodes, each as an agent would, on one gateway.

An episode opens one MCP session to the gateway and makes four calls: run_python writes a
file holding the episode's id, list_files lists it, run_python reads it back, calculate
adds two numbers unique to the episode. Then the trainer's release (`DELETE
/episodes/{id}`) ends it. Printed per round: completed episodes, cross-talk (an answer
holding another episode's data), wall time, p50/p99 episode time, CPU per episode of the
gateway, of its tool servers with their sandboxes, and of this load client; gateway RSS
before the round / at its peak / after release (after a warm-up round, so one-time imports
and pools are not counted as growth), and the gateway's open fds and child processes (its
two tool servers) after release. After the gateway stops: its tool servers still alive and
episode roots left on disk.

    python bench/gateway_load.py [--episodes 128 256 512 1024] [--round-limit-s 900]
    python bench/gateway_load.py --docker [--base-image TAG] [--ca-bundle PEM] ...

With --docker the gateway runs in its container, started with env/gaia/docker-compose.yaml (its
memory limit, capabilities and loopback port) plus this bench's servers YAML mounted in; the
gateway column is then the container's CPU (gateway, tool servers and sandboxes together) and
the memory the container's (its cgroup), before the round, at its peak and after release.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from aworld_train.env.gaia.backends import session_client
from aworld_train.env.launcher import free_port, start_server


def proc_stats(pid: int) -> dict:
    """CPU seconds, RSS (MB) and open fds of `pid` and its descendants' count, from /proc."""
    rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    return {
        "cpu": cpu_seconds(pid),
        "rss": rss,
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "children": len(descendants(pid)),
    }


def cpu_seconds(pid: int, waited_children: bool = False) -> float:
    """User + system CPU of `pid`; with `waited_children`, also of the children it has reaped
    (the python server's sandboxed interpreters)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    used = fields[11:15] if waited_children else fields[11:13]
    return sum(map(int, used)) / os.sysconf("SC_CLK_TCK")


def tools_cpu(gateway_pid: int) -> float:
    """CPU of the tool servers the gateway runs, with the sandboxes they ran."""
    total = 0.0
    for pid in descendants(gateway_pid):
        with contextlib.suppress(OSError):
            total += cpu_seconds(pid, waited_children=True)
    return total


def descendants(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = int(
                    Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]
                )
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [pid]
    while frontier:
        current = frontier.pop()
        kids = [p for p, parent in parents.items() if parent == current]
        found += kids
        frontier += kids
    return found


TIMEOUT = httpx.Timeout(600.0)  # a loaded gateway may take minutes to answer 1024 episodes
AUTH: dict[str, str] = {}  # the container's bearer token, with --docker
STEPS = ("open", "write", "list", "read", "calculate", "release")


async def episode(
    client: httpx.AsyncClient,
    transport: httpx.AsyncBaseTransport,
    url: str,
    base: str,
    name: str,
    index: int,
    steps: dict[str, list[float]],
) -> tuple[float, str]:
    """(seconds, '' or what went wrong) for one episode; each step's time goes to `steps`."""
    headers = {"X-Episode-Id": name, "MCP_SERVERS": "python,calculator", **AUTH}
    started = last = time.perf_counter()

    def mark(step: str) -> None:
        nonlocal last
        now = time.perf_counter()
        steps[step].append(now - last)
        last = now

    # every episode's session shares one connection pool: a client of its own would cost ~30 ms of
    # CPU (its TLS context) on the machine the gateway is measured on
    async with streamable_http_client(url, http_client=session_client(transport, headers, TIMEOUT)) as (
        r, w, _,
    ):  # fmt: skip
        async with ClientSession(r, w) as session:
            await session.initialize()
            mark("open")

            async def call(step: str, tool: str, args: dict) -> str:
                result = await session.call_tool(tool, args)
                text = "".join(getattr(c, "text", "") for c in result.content)
                if result.isError:
                    raise RuntimeError(f"{tool}: {text[:200]}")
                mark(step)
                return text

            write = f"open('note-{index}.txt', 'w').write({name!r})\nprint('ok')"
            await call("write", "run_python", {"code": write})
            listed = await call("list", "list_files", {})
            read = "import glob\nprint([open(p).read() for p in glob.glob('*')])"
            read = await call("read", "run_python", {"code": read})
            total = await call("calculate", "calculate", {"expression": f"{index} + 1000000"})
    released = await client.delete(f"{base}/episodes/{name}", headers=AUTH)
    mark("release")
    elapsed = time.perf_counter() - started
    if released.status_code != 200 or released.json() != {"closed_sessions": 2}:
        raise RuntimeError(f"release answered {released.status_code} {released.text[:200]}")
    if (
        listed.strip() != f"note-{index}.txt"
        or read.strip() != str([name])
        or total.strip() != str(index + 1000000)
    ):
        return elapsed, f"cross-talk: {listed!r} {read!r} {total!r}"
    return elapsed, ""


async def run_round(
    url: str, base: str, count: int, tag: str, steps: dict[str, list[float]] | None = None
) -> tuple[list[float], list[str]]:
    steps = steps if steps is not None else {step: [] for step in STEPS}
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=count, keepalive_expiry=2.0)
    transport = httpx.AsyncHTTPTransport(limits=limits)
    async with httpx.AsyncClient(transport=transport, timeout=TIMEOUT, follow_redirects=True) as client:
        results = await asyncio.gather(
            *(episode(client, transport, url, base, f"{tag}-{i}", i, steps) for i in range(count)),
            return_exceptions=True,
        )
    times, problems = [], []
    for result in results:
        if isinstance(result, BaseException):
            problems.append(f"failed: {result!r}"[:300])
        else:
            times.append(result[0])
            if result[1]:
                problems.append(result[1])
    return times, problems


async def measured_round(
    url: str, base: str, count: int, gateway, limit_s: float, steps: dict[str, list[float]]
) -> tuple[list[float], list[str], float]:
    """A round, with the gateway's peak memory sampled while it runs; past `limit_s` the
    unfinished episodes count as failed."""
    peak = gateway.stats()["rss"]
    done = asyncio.Event()

    async def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, await asyncio.to_thread(lambda: gateway.stats()["rss"]))
            await asyncio.sleep(0.5)

    watcher = asyncio.create_task(watch())
    try:
        times, problems = await asyncio.wait_for(run_round(url, base, count, f"r{count}", steps), limit_s)
    except asyncio.TimeoutError:
        times, problems = [], [f"failed: the round did not finish within {limit_s:g}s"] * count
    finally:
        done.set()
        await watcher
    return times, problems, peak


# Calls queue for minutes at 1024 episodes on 2 cores: sessions must not close as idle between an
# episode's calls, so that its release finds (and the bench checks) both.
CONFIG = {
    "servers": {"python": {"run": "gaia-python", "timeout_s": 600}, "calculator": {"run": "calculator"}},
    "call_timeout_s": 600,
    "connect_timeout_s": 120,
    "session_idle_s": 900,
}


class ProcessGateway:
    """The gateway as a process of this machine."""

    def __init__(self, folder: Path) -> None:
        (folder / "servers.yaml").write_text(yaml.safe_dump(CONFIG))
        env = {
            "GAIA_GATEWAY_CONFIG": str(folder / "servers.yaml"),
            "GAIA_GATEWAY_LOG_DIR": str(folder),
            "GAIA_SANDBOX_DIR": str(folder / "sandbox"),
        }
        self.folder = folder
        self.server = start_server("gaia", log_path=folder / "gateway.log", env=env, startup_timeout_s=120)
        self.url, self.base = self.server.url, f"http://{self.server.host}:{self.server.port}"
        self.pid = self.server.process.pid
        self.servers = descendants(self.pid)
        self.label = f"gateway pid {self.pid}"

    def stats(self) -> dict:
        return proc_stats(self.pid)

    def tools_cpu(self) -> float:
        return tools_cpu(self.pid)

    def stop(self) -> str:
        self.server.stop()
        alive = [p for p in self.servers if Path(f"/proc/{p}").exists()]
        roots = list((self.folder / "sandbox").glob("run-*"))
        return (
            f"gateway exited {self.server.process.returncode}; {len(alive)} of its {len(self.servers)} "
            f"tool servers alive; {len(roots)} episode roots left"
        )


class ContainerGateway:
    """The gateway in its container, from env/gaia/docker-compose.yaml with this bench's servers."""

    COMPOSE = Path(__file__).resolve().parents[1] / "env" / "gaia" / "docker-compose.yaml"

    def __init__(self, folder: Path, base_image: str | None, ca_bundle: str | None) -> None:
        (folder / "servers.yaml").write_text(yaml.safe_dump(CONFIG))
        override = {"services": {"gateway": {
            "environment": {"GAIA_GATEWAY_CONFIG": "/etc/gaia-bench/servers.yaml"},
            "volumes": [f"{folder}:/etc/gaia-bench:ro"],
        }}}  # fmt: skip
        (folder / "bench.yaml").write_text(yaml.safe_dump(override))
        self.port, token = free_port(), secrets.token_hex(16)
        AUTH["Authorization"] = f"Bearer {token}"
        self.env = {**os.environ, "COMPOSE_PROJECT_NAME": f"gaia-bench-{os.getpid()}",
                    "GAIA_MCP_PORT": str(self.port), "GAIA_GATEWAY_TOKEN": token, "GAIA_DATA_DIR": str(folder)}  # fmt: skip
        if base_image:
            self.env["GAIA_BASE_IMAGE"] = base_image
        ca = self.COMPOSE.parent / "ca" / "ca-bundle.crt"
        if ca_bundle:
            shutil.copy(ca_bundle, ca)
        try:
            self.compose("up", "-d", "--build", "--wait")
        finally:
            ca.unlink(missing_ok=True)
        self.url, self.base = f"http://127.0.0.1:{self.port}/mcp", f"http://127.0.0.1:{self.port}"
        self.container = self.compose("ps", "-q", "gateway").strip()
        self.label = (
            f"container {self.container[:12]} (memory limit {self.inspect('{{.HostConfig.Memory}}')} bytes)"
        )

    def compose(self, *args: str) -> str:
        return subprocess.run(["docker", "compose", "-f", str(self.COMPOSE), "-f", str(Path(self.env["GAIA_DATA_DIR"]) / "bench.yaml"), *args],
                              env=self.env, check=True, capture_output=True, text=True).stdout  # fmt: skip

    def inspect(self, template: str) -> str:
        return subprocess.run(["docker", "inspect", "-f", template, self.container],
                              check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip

    def _cgroup(self, name: str) -> str:
        return subprocess.run(["docker", "exec", self.container, "cat", f"/sys/fs/cgroup/{name}"],
                              capture_output=True, text=True).stdout  # fmt: skip

    def stats(self) -> dict:
        """The container's CPU seconds and memory (MB), from its cgroup (v1 or v2)."""
        usage = self._cgroup("cpuacct/cpuacct.usage").strip()
        if usage:
            cpu = int(usage) / 1e9
            memory = int(self._cgroup("memory/memory.usage_in_bytes") or 0)
        else:
            stat = dict(line.split() for line in self._cgroup("cpu.stat").splitlines())
            cpu = int(stat.get("usage_usec", 0)) / 1e6
            memory = int(self._cgroup("memory.current") or 0)
        return {"cpu": cpu, "rss": memory / 2**20, "fds": -1, "children": -1}  # -1: not counted

    def tools_cpu(self) -> float:
        return 0.0  # inside the container's figure

    def stop(self) -> str:
        self.compose("down", "--volumes", "--timeout", "10")
        left = self.compose("ps", "-a", "-q").strip()
        return f"compose down: {len(left.split()) if left else 0} containers left"


def measure(gateway, count: int, args) -> None:
    """One measured round of `count` episodes: its line, the mean time of each step, its problems."""
    before, tools_before = gateway.stats(), gateway.tools_cpu()
    client_before = resource.getrusage(resource.RUSAGE_SELF)
    steps: dict[str, list[float]] = {step: [] for step in STEPS}
    started = time.perf_counter()
    times, problems, peak = asyncio.run(
        measured_round(gateway.url, gateway.base, count, gateway, args.round_limit_s, steps)
    )
    wall = time.perf_counter() - started
    client_after = resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(args.settle_s)
    after, tools_after = gateway.stats(), gateway.tools_cpu()
    failed = sum(p.startswith("failed") for p in problems)
    crosstalk = sum(p.startswith("cross-talk") for p in problems)
    p50 = statistics.median(times) if times else float("nan")
    p99 = sorted(times)[int(0.99 * (len(times) - 1))] if times else float("nan")
    cpu = (after["cpu"] - before["cpu"]) / count * 1000
    tools = (tools_after - tools_before) / count * 1000
    client = sum(
        getattr(client_after, f) - getattr(client_before, f) for f in ("ru_utime", "ru_stime")
    ) / count * 1000  # fmt: skip
    print(
        f"{count:>8} | {len(times) - crosstalk:>5} {failed:>6} {crosstalk:>6} | "
        f"{wall:>6.1f} {p50:>6.2f} {p99:>6.2f} | {cpu:>7.1f} {tools:>6.1f} {client:>6.1f}           | "
        f"{before['rss']:>17.0f} / {peak:>6.0f} / {after['rss']:>6.0f} | "
        f"{after['fds'] if after['fds'] >= 0 else '-':>4} {after['children'] if after['children'] >= 0 else '-':>5}",
        flush=True,
    )
    means = ", ".join(f"{k} {statistics.mean(v):.2f}" for k, v in steps.items() if v)
    print(f"{'':>8}   mean s per step: {means}", flush=True)
    for problem in problems[:5]:
        print("   ", problem)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, nargs="+", default=[128, 256, 512, 1024])
    parser.add_argument("--warmup", type=int, default=32, help="episodes run before the first measured round")
    parser.add_argument("--settle-s", type=float, default=3.0, help="wait after release before measuring")
    parser.add_argument("--round-limit-s", type=float, default=900.0, help="a round's time bound")
    parser.add_argument("--docker", action="store_true", help="the gateway in its container (docker compose)")
    parser.add_argument("--base-image", help="with --docker: the image's BASE_IMAGE (GAIA_BASE_IMAGE)")
    parser.add_argument("--ca-bundle", help="with --docker: a CA bundle pip trusts during the build")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # a connection per episode
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    folder = Path(tempfile.mkdtemp(prefix="gateway-load-"))
    gateway = (
        ContainerGateway(folder, args.base_image, args.ca_bundle) if args.docker else ProcessGateway(folder)
    )
    url, base = gateway.url, gateway.base
    health = httpx.get(base + "/health").json()
    print(f"{gateway.label}; python server: {health['servers']['python']['status']}; {os.cpu_count()} cores")
    memory = "container memory MB before/peak/after" if args.docker else "gateway rss MB before/peak/after"
    header = (
        f"{'episodes':>8} | {'done':>5} {'failed':>6} {'x-talk':>6} | {'wall s':>6} {'p50 s':>6} {'p99 s':>6} | "
        f"{'gateway':>7} {'tools':>6} {'client':>6} cpu ms/ep | {memory:>37} | "
        f"{'fds':>4} {'procs':>5}"
    )
    try:
        if args.warmup:
            asyncio.run(run_round(url, base, args.warmup, "warmup"))
            time.sleep(args.settle_s)
        print(header, flush=True)
        for count in args.episodes:
            measure(gateway, count, args)
        health = httpx.get(base + "/health").json()
        print(f"after all rounds: {health['sessions']} sessions open, {health['episodes']} episodes")
    finally:
        print(f"after stop: {gateway.stop()}")
    sys.exit(0)


if __name__ == "__main__":
    main()
