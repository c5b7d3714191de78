"""Where an episode's CPU time goes: per-episode CPU by component, at several concurrencies.

The calculator agent (real AWorld agent, real calculator MCP server over HTTP) runs against
a scripted policy with a fixed latency (2 LLM calls and 1 tool call per episode). For each
concurrency the bench runs the episodes twice:

- unprofiled: wall time, this process's CPU (all threads) and the MCP server's CPU per episode;
- under cProfile (the event-loop thread and AWorld's sandbox loop threads): each function's
  own time goes to a component by its module; time in generic code (asyncio, json, copy,
  builtins, pydantic, ...) goes to the callers that led into it, in proportion.

The table prints the profiled shares scaled to the unprofiled CPU per episode (the profiler's
own cost inflates every function, roughly evenly). Compare rows of one run.

    python bench/rollout_profile.py [--concurrency 1 64] [--latency 0.05] [--episodes-at-1 16]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import threading
import time
from collections import defaultdict
from pathlib import Path

from scripted import calculator_agent, calculator_script, calculator_task, load_tokenizer, scripted_runtime

# (component, substrings of a code object's file name or of a builtin's name), first match wins
COMPONENTS: list[tuple[str, tuple[str, ...]]] = [
    ("fake policy (the bench's model)", ("bench/scripted.py", "rollout/policies/client.py")),
    ("tool-call parsing", ("aworld_train/rollout/tool_parser", "train/rollout/tool_parser")),
    (
        "ledger and chat template",
        ("rollout/ledger", "rollout/chat", "jinja2/", "transformers/", "tokenizers", "rollout/codec"),
    ),
    ("our episode and provider", ("aworld_train/", "wt-speed/train/", "/train/rollout/", "/train/aworld/")),
    (
        "logging and token counting",
        ("/logging/", "aworld/logs", "tiktoken", "aworld/models/utils", "rich/", "traceback.py", "loguru"),
    ),
    ("memory", ("aworld/memory",)),
    ("event bus and message waits", ("aworld/events", "aworld/core/event", "state_manager")),
    (
        "MCP client (sessions, listing, calls, HTTP)",
        (
            "/mcp/",
            "httpx",
            "httpcore",
            "anyio",
            "h11",
            "ssl",
            "certifi",
            "aworld/mcp_client",
            "aworld/sandbox",
        ),
    ),
    (
        "AWorld task, swarm, context and agent step",
        ("aworld/runner", "aworld/core/", "aworld/agents/", "aworld/output", "aworld/trace", "aworld/"),
    ),
]
OTHER = "asyncio loop and everything else"
# code whose own time belongs to whoever called it
GENERIC = (
    "/asyncio/",
    "json/",
    "copy.py",
    "/re/",
    "re.py",
    "pydantic",
    "typing.py",
    "uuid.py",
    "threading.py",
    "inspect.py",
    "functools.py",
    "enum.py",
    "abc.py",
    "dataclasses.py",
    "contextlib.py",
    "weakref",
    "queue.py",
    "datetime",
    "<frozen",
    "<string>",
    "<built-in",
    "<method",
    "string.py",
    "_weakrefset",
    "collections/",
    "selectors.py",
    "socket.py",
    "torch/package",
    "linecache.py",
    "urllib/",
)


def component_of(key: tuple) -> str | None:
    """The component of a pstats key, or None for generic code."""
    filename, _, name = key
    where = filename if filename != "~" else name
    if any(g in where for g in GENERIC):
        return None
    for label, marks in COMPONENTS:
        if any(m in where for m in marks):
            return label
    return OTHER


def attribute(stats: dict, debug: dict | None = None) -> dict[str, float]:
    """Seconds of own time per component; generic code's time goes up to its callers."""
    memo: dict[tuple, dict[str, float]] = {}

    def shares(key: tuple, depth: int, seen: frozenset) -> dict[str, float]:
        label = component_of(key)
        if label is not None:
            return {label: 1.0}
        if key in memo:
            return memo[key]
        callers = stats[key][4] if key in stats else {}
        weights = {c: edge[3] or edge[2] for c, edge in callers.items() if c not in seen}
        total = sum(weights.values())
        if depth > 200 or not total:
            return {OTHER: 1.0}
        out: dict[str, float] = defaultdict(float)
        for caller, w in weights.items():
            for lab, frac in shares(caller, depth + 1, seen | {key}).items():
                out[lab] += frac * w / total
        memo[key] = dict(out)
        return memo[key]

    result: dict[str, float] = defaultdict(float)
    for key, (_, _, tottime, _, _) in stats.items():
        if tottime:
            for label, frac in shares(key, 0, frozenset()).items():
                result[label] += tottime * frac
                if debug is not None and label == OTHER:
                    debug[key] = debug.get(key, 0.0) + tottime * frac
    return dict(result)


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of process `pid` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sandbox_loops() -> list:
    from aworld.sandbox.runtime.loop_pool import SandboxLoopPool

    return list(SandboxLoopPool._instance._loops) if SandboxLoopPool._instance is not None else []


async def episodes(spec, runtime, n: int, concurrency: int, offset: int) -> list:
    from aworld_train.rollout.episodes.episode import Episode

    limit = asyncio.Semaphore(concurrency)

    async def one(i: int):
        async with limit:
            return await Episode(spec, calculator_task(i), runtime).run()

    trajs = await asyncio.gather(*(one(offset + i) for i in range(n)))
    bad = [t.status for t in trajs if t.status != "ok" or not t.tool_calls]
    assert not bad, f"episodes did not run cleanly: {bad[:5]} {trajs[0].error}"
    return trajs


def run_profiled(spec, runtime, n: int, concurrency: int, offset: int) -> pstats.Stats:
    """Run the episodes with cProfile in the loop thread and in AWorld's sandbox loop threads."""
    profilers = [cProfile.Profile(time.thread_time)]  # CPU of the profiled thread, not wall time

    async def main() -> None:
        loop_profilers = []
        for loop in sandbox_loops():
            prof = cProfile.Profile(time.thread_time)
            asyncio.run_coroutine_threadsafe(_enable(prof), loop).result(5)
            loop_profilers.append((loop, prof))
        profilers[0].enable()
        try:
            await episodes(spec, runtime, n, concurrency, offset)
        finally:
            profilers[0].disable()
            for loop, prof in loop_profilers:
                asyncio.run_coroutine_threadsafe(_disable(prof), loop).result(5)
                profilers.append(prof)

    asyncio.run(main())
    merged = pstats.Stats(profilers[0])
    for prof in profilers[1:]:
        try:
            merged.add(prof)
        except TypeError:  # a thread that ran nothing
            pass
    return merged


async def _enable(prof: cProfile.Profile) -> None:
    prof.enable()


async def _disable(prof: cProfile.Profile) -> None:
    prof.disable()


def measure(spec, server, concurrency: int, n: int, latency: float, offset: int) -> tuple:
    """One concurrency's row: wall, this process's CPU and the server's, unprofiled; then the CPU
    by component, profiled. Each run takes fresh episode ids from `offset` on (3 x n of them)."""
    tokenizer = load_tokenizer()

    def runtime():
        script = calculator_script(tokenizer)
        return scripted_runtime(tokenizer, script, latency, concurrency=concurrency, episode_timeout_s=600)

    asyncio.run(episodes(spec, runtime(), min(n, 4), concurrency, offset))  # warm-up
    cpu0, server0, wall0 = time.process_time(), process_cpu(server.process.pid), time.perf_counter()
    trajs = asyncio.run(episodes(spec, runtime(), n, concurrency, offset + n))
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    server_cpu = process_cpu(server.process.pid) - server0
    threading.setprofile(None)
    stats = run_profiled(spec, runtime(), n, concurrency, offset + 2 * n).stats  # type: ignore[attr-defined]
    debug: dict | None = {} if os.environ.get("PROFILE_DEBUG") else None
    parts = attribute(stats, debug)
    for key, secs in sorted((debug or {}).items(), key=lambda kv: -kv[1])[:30]:
        print(f"{secs:8.3f} {key}  callers: {list(stats[key][4])[:3]}")
    return (concurrency, n, wall, cpu, server_cpu, parts, trajs)


def report(rows: list[tuple], latency: float, calls: int = 2) -> None:
    print(f"scripted model latency {latency * 1000:.0f} ms per call; {calls} LLM calls, 1 tool call/episode")
    labels = [label for label, _ in COMPONENTS] + [OTHER]
    header = f"{'client CPU ms per episode':<46}" + "".join(f"{f'c={r[0]}':>10}" for r in rows)
    print(header)
    print("-" * len(header))
    for label in labels:
        cells = []
        for _, n, _, cpu, _, parts, _ in rows:
            own = sum(parts.values())
            cells.append(f"{1000 * cpu / n * parts.get(label, 0.0) / own if own else 0:>10.1f}")
        print(f"{label:<46}" + "".join(cells))
    print("-" * len(header))
    print(
        f"{'client CPU, all threads (unprofiled)':<46}"
        + "".join(f"{1000 * r[3] / r[1]:>10.1f}" for r in rows)
    )
    print(
        f"{'MCP server process CPU (tools, HTTP, logs)':<46}"
        + "".join(f"{1000 * r[4] / r[1]:>10.1f}" for r in rows)
    )
    print(f"{'episodes/s (unprofiled)':<46}" + "".join(f"{r[1] / r[2]:>10.2f}" for r in rows))
    for concurrency, n, wall, *_ in rows:
        if concurrency == 1:
            per_turn = (wall / n - calls * latency) / calls
            print(f"per-turn overhead at concurrency 1: {per_turn * 1000:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--latency", type=float, default=0.05, help="scripted model latency per call, s")
    parser.add_argument("--episodes-at-1", type=int, default=16)
    args = parser.parse_args()
    rows, offset = [], 0
    with calculator_agent() as (spec, server):
        for concurrency in args.concurrency:
            n = args.episodes_at_1 if concurrency == 1 else concurrency
            rows.append(measure(spec, server, concurrency, n, args.latency, offset))
            offset += 3 * n
    report(rows, args.latency)


if __name__ == "__main__":
    main()
