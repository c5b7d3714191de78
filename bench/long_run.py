"""A long run in one process: does every batch cost what the second one did?

Batches of episodes of the real calculator agent against the calculator MCP server over
HTTP, with a fake policy (fixed latency, scripted replies: `scripted.py`),
each batch in its own event loop as the local backend runs its steps. Printed per batch:
wall seconds, episodes/s, the process's CPU seconds, RSS, open connections to the server,
`Sandbox.cleanup` calls per episode, and the sizes of AWorld's process-wide registries
after the batch. `--keep-registries` restores what AWorld 0.3.2 does by itself (only the
history is dropped), to compare.

    python bench/long_run.py [--batches 30] [--episodes 64] [--concurrency 64] [--latency 0.05]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time

import psutil
from scripted import calculator_agent, calculator_script, calculator_task, load_tokenizer, scripted_runtime

SHOWN = ("agents", "sandboxes", "sandbox_workers", "sandbox_loop_tasks", "state_nodes", "event_queues")


def open_connections(port: int) -> int:
    return sum(
        1
        for c in psutil.Process().net_connections(kind="tcp")
        if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
    )


def count_cleanups() -> list[int]:
    """Counts AWorld's Sandbox.cleanup calls (the work that grew with every agent ever made)."""
    from aworld.sandbox.implementations.sandbox import Sandbox

    calls = [0]
    original = Sandbox.cleanup

    async def counted(self):
        calls[0] += 1
        return await original(self)

    Sandbox.cleanup = counted
    return calls


def keep_registries() -> None:
    """Episodes drop only their history, as before `release_episode`."""
    import aworld_train.aworld.framework as runtime

    async def history_only(agents: list, session_id: str) -> None:
        runtime.release_session(session_id)

    runtime.release_episode = history_only  # AWorldRun.release looks it up when it runs


def run_batch(spec, runtime, b: int, episodes: int, port: int, cleanups: list[int]) -> str:
    """Batch `b` in an event loop of its own, as the local backend runs a step; its line."""
    from aworld_train.aworld.framework import registry_sizes
    from aworld_train.rollout.episodes.batch import run_episodes

    process = psutil.Process()
    tasks = [calculator_task(b * 1000 + i, f"{b}-{i}") for i in range(episodes)]
    cleanups[0] = 0
    cpu = sum(process.cpu_times()[:2])
    started = time.perf_counter()
    trajs = asyncio.run(run_episodes(spec, tasks, runtime))
    seconds = time.perf_counter() - started
    cpu = sum(process.cpu_times()[:2]) - cpu
    bad = [t.status for t in trajs if t.status != "ok" or not t.tool_calls]
    assert not bad, f"batch {b}: {bad[:5]}"
    sizes = registry_sizes()
    return (
        f"{b + 1:>5}{seconds:>8.2f}{len(trajs) / seconds:>7.1f}{cpu:>7.1f}"
        f"{process.memory_info().rss / 2**20:>8.0f}{open_connections(port):>6}"
        f"{cleanups[0] / len(trajs):>11.1f}  " + " ".join(f"{sizes[k]:>{len(k)}}" for k in SHOWN)
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--episodes", type=int, default=64, help="episodes per batch")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.05, help="fake model latency per call, seconds")
    parser.add_argument(
        "--keep-registries", action="store_true", help="leave AWorld's registries as 0.3.2 does"
    )
    args = parser.parse_args()

    from aworld_train.aworld import install

    install()
    if args.keep_registries:
        keep_registries()
    cleanups = count_cleanups()
    tokenizer = load_tokenizer()
    # generous tool and episode limits: a loaded machine must not turn slow calls into failed episodes
    runtime = scripted_runtime(
        tokenizer,
        calculator_script(tokenizer),
        args.latency,
        concurrency=args.concurrency,
        episode_timeout_s=600,
        tool_timeout_s=300,
    )
    with calculator_agent() as (spec, server):
        port = int(re.findall(r":(\d+)", server.url)[0])
        print(
            f"{args.batches} batches of {args.episodes} episodes at concurrency {args.concurrency}, "
            f"fake model {args.latency * 1000:.0f} ms per call"
            + (" (registries kept as AWorld leaves them)" if args.keep_registries else "")
        )
        print(
            f"{'batch':>5}{'s':>8}{'ep/s':>7}{'cpu s':>7}{'rss MB':>8}{'conns':>6}{'cleanup/ep':>11}  "
            + " ".join(SHOWN)
        )
        for b in range(args.batches):
            print(run_batch(spec, runtime, b, args.episodes, port, cleanups), flush=True)


if __name__ == "__main__":
    main()
