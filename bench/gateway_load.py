"""GAIA gateway under load: N concurrent episodes, each as an agent would, on one gateway.

An episode opens one MCP session to the gateway and makes four calls: run_python writes a
file holding the episode's id, list_files lists it, run_python reads it back, calculate
adds two numbers unique to the episode. Then the trainer's release (`DELETE
/episodes/{id}`) ends it. Printed per round: completed episodes, cross-talk (an answer
holding another episode's data), p50/p99 episode time, gateway CPU seconds per episode,
gateway RSS before the round / at its peak / after release, and the gateway's open fds and
child processes left after release.

    python bench/gateway_load.py [--episodes 128 256 512 1024]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

from aworld_train.env.launcher import start_server


def proc_stats(pid: int) -> dict:
    """CPU seconds, RSS (MB) and open fds of `pid` and its descendants' count, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    return {
        "cpu": (int(fields[11]) + int(fields[12])) / ticks,
        "rss": rss,
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "children": len(descendants(pid)),
    }


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


async def episode(url: str, base: str, name: str, index: int) -> tuple[float, str]:
    """('' or what went wrong, seconds) for one episode."""
    headers = {"X-Episode-Id": name, "MCP_SERVERS": "python,calculator"}
    started = time.perf_counter()
    async with streamablehttp_client(url, headers=headers, timeout=600, sse_read_timeout=600) as (r, w, _):
        async with ClientSession(r, w) as session:
            await session.initialize()

            async def call(tool: str, args: dict) -> str:
                result = await session.call_tool(tool, args)
                text = "".join(getattr(c, "text", "") for c in result.content)
                if result.isError:
                    raise RuntimeError(f"{tool}: {text[:200]}")
                return text

            await call("run_python", {"code": f"open('note-{index}.txt', 'w').write({name!r})\nprint('ok')"})
            listed = await call("list_files", {})
            read = await call(
                "run_python", {"code": "import glob\nprint([open(p).read() for p in glob.glob('*')])"}
            )
            total = await call("calculate", {"expression": f"{index} + 1000000"})
    async with httpx.AsyncClient() as client:
        await client.delete(f"{base}/episodes/{name}", timeout=60)
    elapsed = time.perf_counter() - started
    if (
        listed.strip() != f"note-{index}.txt"
        or read.strip() != str([name])
        or total.strip() != str(index + 1000000)
    ):
        return elapsed, f"cross-talk: {listed!r} {read!r} {total!r}"
    return elapsed, ""


async def run_round(url: str, base: str, count: int, tag: str) -> tuple[list[float], list[str]]:
    results = await asyncio.gather(
        *(episode(url, base, f"{tag}-{i}", i) for i in range(count)), return_exceptions=True
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


async def measured_round(url: str, base: str, count: int, pid: int) -> tuple[list[float], list[str], float]:
    """A round, with the gateway's peak RSS sampled while it runs."""
    peak = proc_stats(pid)["rss"]
    done = asyncio.Event()

    async def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, proc_stats(pid)["rss"])
            await asyncio.sleep(0.5)

    watcher = asyncio.create_task(watch())
    try:
        times, problems = await run_round(url, base, count, f"r{count}")
    finally:
        done.set()
        await watcher
    return times, problems, peak


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, nargs="+", default=[128, 256, 512, 1024])
    parser.add_argument("--settle-s", type=float, default=3.0, help="wait after release before measuring")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="gateway-load-"))
    servers = {
        "python": {"run": "gaia-python", "timeout_s": 600},
        "calculator": {"run": "calculator"},
    }
    config = {"servers": servers, "call_timeout_s": 600, "connect_timeout_s": 120}
    (folder / "servers.yaml").write_text(yaml.safe_dump(config))
    env = {"GAIA_GATEWAY_CONFIG": str(folder / "servers.yaml"), "GAIA_GATEWAY_LOG_DIR": str(folder)}
    gateway = start_server("gaia", log_path=folder / "gateway.log", env=env, startup_timeout_s=120)
    base = f"http://{gateway.host}:{gateway.port}"
    pid = gateway.process.pid
    print(f"gateway pid {pid}; sandbox: {httpx.get(base + '/health').json()['servers']['python']['status']}")
    header = (
        f"{'episodes':>8} | {'done':>5} {'failed':>6} {'x-talk':>6} | {'p50 s':>6} {'p99 s':>6} | "
        f"{'cpu/ep ms':>9} | {'rss MB before/peak/after':>24} | {'fds':>4} {'procs':>5}"
    )
    print(header, flush=True)
    try:
        for count in args.episodes:
            before = proc_stats(pid)
            times, problems, peak = asyncio.run(measured_round(gateway.url, base, count, pid))
            time.sleep(args.settle_s)
            after = proc_stats(pid)
            failed = sum(p.startswith("failed") for p in problems)
            crosstalk = sum(p.startswith("cross-talk") for p in problems)
            p50 = statistics.median(times) if times else float("nan")
            p99 = sorted(times)[int(0.99 * (len(times) - 1))] if times else float("nan")
            cpu = (after["cpu"] - before["cpu"]) / count * 1000
            print(
                f"{count:>8} | {len(times) - crosstalk:>5} {failed:>6} {crosstalk:>6} | {p50:>6.2f} {p99:>6.2f} | "
                f"{cpu:>9.1f} | {before['rss']:>7.0f} / {peak:>6.0f} / {after['rss']:>6.0f} | "
                f"{after['fds']:>4} {after['children']:>5}",
                flush=True,
            )
            for problem in problems[:5]:
                print("   ", problem)
        health = httpx.get(base + "/health").json()
        print(f"after all rounds: {health['sessions']} sessions open, {health['episodes']} episodes")
    finally:
        gateway.stop()
    left = descendants(pid)
    print(f"after stop: gateway exited {gateway.process.returncode}, {len(left)} of its processes left")
    sys.exit(0)


if __name__ == "__main__":
    main()
