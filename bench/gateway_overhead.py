"""GAIA gateway overhead: tool calls through the gateway against the same server called directly.

Each simulated episode opens one MCP client session (as an agent does) and makes
`--calls` calls to the calculator's `calculate`; episodes run `--concurrency` at a
time. Printed: calls per second and mean latency for the calculator server alone
and for the same server behind the gateway (which adds a hop, the header filter
and a backend session per episode), and their ratio.

    python bench/gateway_overhead.py [--episodes 64] [--calls 8] [--concurrency 1 16 64]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

from aworld_train.env.launcher import start_server


async def episode(url: str, name: str, calls: int, latencies: list[float]) -> None:
    headers = {"X-Episode-Id": name, "MCP_SERVERS": "calculator"}
    async with streamablehttp_client(url, headers=headers) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for i in range(calls):
                started = time.perf_counter()
                result = await session.call_tool("calculate", {"expression": f"{i} * 7"})
                latencies.append(time.perf_counter() - started)
                if result.isError:
                    raise RuntimeError(result.content)


async def measure(url: str, episodes: int, calls: int, concurrency: int, tag: str) -> tuple[float, float]:
    latencies: list[float] = []
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate:
            await episode(url, f"{tag}-{concurrency}-{i}", calls, latencies)

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(episodes)))
    wall = time.perf_counter() - started
    return episodes * calls / wall, statistics.mean(latencies) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    (folder / "servers.yaml").write_text(yaml.safe_dump({"servers": {"calculator": {"run": "calculator"}}}))
    env = {"GAIA_GATEWAY_CONFIG": str(folder / "servers.yaml"), "GAIA_GATEWAY_LOG_DIR": str(folder)}
    direct = start_server("calculator", log_path=folder / "calculator.log")
    gateway = start_server("gaia", log_path=folder / "gateway.log", env=env, startup_timeout_s=120)
    try:
        print(
            f"{'concurrency':>11} | {'direct calls/s':>14} {'ms':>7} | {'gateway calls/s':>15} {'ms':>7} | ratio"
        )
        for concurrency in args.concurrency:
            d_rate, d_ms = asyncio.run(measure(direct.url, args.episodes, args.calls, concurrency, "d"))
            g_rate, g_ms = asyncio.run(measure(gateway.url, args.episodes, args.calls, concurrency, "g"))
            print(f"{concurrency:>11} | {d_rate:>14.1f} {d_ms:>7.1f} | {g_rate:>15.1f} {g_ms:>7.1f} | "
                  f"{g_rate / d_rate:.2f}x", flush=True)  # fmt: skip
    finally:
        gateway.stop()
        direct.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
