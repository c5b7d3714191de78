"""The gateway at its edges: its resident memory across oversized requests and crowds of concurrent
calls, and what one session's long (allowed) prompt costs another session's calls.

The trainer side is this process, as in a run: the gateway's thread, the episodes on this
process's loop, a scripted policy (instant). The agent is a process of its own (this file with
`--agent`, a `ProcessAgent`), so its requests' bodies are not counted in the gateway's memory. Each
episode's user turn names what the agent sends on its session:

  sizes:  bodies of 10 MB and 100 MB (declared), 100 MB chunked (no Content-Length), a
          Content-Length of 10 GB with no body, a 1 MB message (beyond the token budget)
  crowd:  200 concurrent calls (`openai` SDK)
  four:   4 concurrent calls; 64 such episodes run at once
  pings:  20 calls one after another, timed
  long:   one call whose message is 300,000 characters (about 50,000 tokens; the budget takes it)

After a warm-up round (imports, pools, the agent process's start, the template's first renders),
the trainer process's RSS is read (after garbage collection), then --rounds rounds of sizes, crowd
and 64 x four, and the RSS again. Then pings alone, and pings beside long. Printed: every answer's
status, the RSS before, after and their difference, and the pinging session's call latency (p50,
max) alone and beside the long prompt. Exits 1 if the RSS grew by more than --rss-bound-mb.

    python bench/gateway_edges.py [--rounds 5] [--rss-bound-mb 20] [--on-loop]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from agent_process import serve_turns
from scripted import load_tokenizer, scripted_runtime

MB = 2**20
LONG_CHARS = 300_000
OUT = "AWORLD_TRAIN_BENCH_OUT"  # the agent process's results, one JSON line per turn


def rss_mb() -> float:
    gc.collect()
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MB


# -- the agent process (--agent) ---------------------------------------------------------------
def _message(text: str) -> bytes:
    return b'{"messages": [{"role": "user", "content": "' + text.encode() + b'"}]}'


async def _declared_10gb(base_url: str, token: str) -> int:
    import httpx

    url = httpx.URL(base_url)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    writer.write(
        f"POST {url.path}/chat/completions HTTP/1.1\r\nHost: {url.host}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Length: {10 * 1024 * MB}\r\n\r\n".encode()
    )
    try:
        async with asyncio.timeout(10):
            return int((await reader.readline()).split()[1])
    finally:
        writer.close()


async def _chunks(total: int):
    yield b'{"messages": [{"role": "user", "content": "'
    for _ in range(total // MB):
        yield b"x" * MB


async def _sizes(base_url: str, token: str) -> list[tuple[str, int]]:
    import httpx

    out = []
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60) as http:
        for label, size in (("10 MB body", 10 * MB), ("100 MB body", 100 * MB), ("1 MB message", MB)):
            out.append(
                (label, (await http.post("/chat/completions", content=_message("x" * size))).status_code)
            )
        answer = await http.post("/chat/completions", content=_chunks(100 * MB))
        out.append(("100 MB chunked body", answer.status_code))
    out.append(("10 GB Content-Length, no body", await _declared_10gb(base_url, token)))
    async with httpx.AsyncClient(
        base_url=base_url, headers=headers, timeout=60
    ) as http:  # the episode goes on
        out.append(
            (
                "a small call after them",
                (await http.post("/chat/completions", content=_message("hi"))).status_code,
            )
        )
    return out


async def _calls(client, texts: list[str]) -> list[int]:
    answers = await asyncio.gather(
        *(
            client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": t}]
            )
            for t in texts
        )
    )
    return [a.status_code for a in answers]


async def agent_turn(turn: dict) -> dict:
    from openai import AsyncOpenAI

    action = turn["text"]
    async with AsyncOpenAI(base_url=turn["base_url"], api_key=turn["api_key"], max_retries=0) as client:
        if action == "sizes":
            return {"statuses": await _sizes(turn["base_url"], turn["api_key"])}
        if action in ("crowd", "four"):
            count = 200 if action == "crowd" else 4
            codes = await _calls(client, [f"call {k}" for k in range(count)])
            label = (
                "200 concurrent calls, one session"
                if action == "crowd"
                else "4 concurrent calls x 64 sessions"
            )
            return {"statuses": [(label, code) for code in codes]}
        if action == "pings":
            took = []
            for k in range(20):
                started = time.perf_counter()
                await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": f"ping {k}"}]
                )
                took.append(time.perf_counter() - started)
            return {"pings": took}
        started = time.perf_counter()  # long
        codes = await _calls(client, [" hello" * (LONG_CHARS // 6)])  # a token per word
        return {"long": [codes[0], time.perf_counter() - started]}


async def agent_main() -> None:
    out = open(os.environ[OUT], "a")

    async def recorded(turn: dict) -> str:  # what the agent saw goes to the results file
        result = await agent_turn(turn)
        out.write(json.dumps({"episode_id": turn["episode_id"], **result}) + "\n")
        out.flush()
        return ""

    await serve_turns(recorded)


# -- the trainer side ----------------------------------------------------------------------------
async def bench(args, out: Path) -> int:
    from aworld_train.rollout.episodes import llm_call
    from aworld_train.rollout.episodes.batch import run_episodes
    from aworld_train.rollout.episodes.trajectory import Task
    from aworld_train.rollout.gateway.process_agent import ProcessAgent

    if args.on_loop:  # every prompt tokenized on the episodes' loop, as before the thread
        llm_call._THREAD_CHARS = float("inf")
    tokenizer = load_tokenizer()
    agent = ProcessAgent(name="edges", command=[sys.executable, __file__, "--agent"], env={OUT: str(out)})
    # wide: the long prompt fits its budget; one policy, whose record of every call is not the gateway's
    tight = scripted_runtime(
        tokenizer, lambda ids: "ok", max_assistant_turns=256, max_total_tokens=8192, concurrency=64
    )
    wide = replace(tight, settings=tight.settings.model_copy(update={"max_total_tokens": 65536}))
    policy = tight.router.default

    async def episodes(actions: list[str], rt) -> None:
        trajs = await run_episodes(agent, [Task(f"{a}{i}", [a]) for i, a in enumerate(actions)], rt)
        bad = {t.status for t in trajs} - {"ok"}
        if bad:
            raise SystemExit(f"episodes ended {bad}: {[t.error for t in trajs if t.error][:2]}")

    async def round_() -> None:
        await episodes(["sizes"], tight)
        await episodes(["crowd"], tight)
        await episodes(["four"] * 64, tight)
        policy.prompts.clear(), policy.generations.clear()

    await round_()  # warm-up
    before = rss_mb()
    for _ in range(args.rounds):
        await round_()
    after = rss_mb()
    await episodes(["pings"], wide)
    await episodes(["long", "pings"], wide)
    warm_lines = 1 + 1 + 64  # the warm-up round's turns
    report(args, [json.loads(line) for line in out.read_text().splitlines()][warm_lines:], before, after)
    return 1 if after - before > args.rss_bound_mb else 0


def report(args, results: list[dict], before: float, after: float) -> None:
    """Every answer's status, the RSS across the rounds, another session's calls beside a long prompt."""
    statuses = Counter(tuple(s) for r in results for s in r.get("statuses", []))
    alone, beside = [r["pings"] for r in results if "pings" in r]
    code, seconds = next(r["long"] for r in results if "long" in r)
    print(f"{args.rounds} rounds; every answer's status (count):")
    for (label, status), count in sorted(statuses.items()):
        print(f"  {label:>34}: {status} x{count}")
    print(
        f"trainer process RSS before {before:.1f} MB, after {after:.1f} MB: {after - before:+.1f} MB (bound {args.rss_bound_mb:g} MB)"
    )
    print(
        f"another session's calls, ms: alone p50 {1000 * statistics.median(alone):.1f} max {1000 * max(alone):.1f}; "
        f"beside a {LONG_CHARS}-character prompt (answered {code} in {seconds:.2f}s, tokenized "
        f"{'on the loop' if args.on_loop else 'on a thread'}) p50 {1000 * statistics.median(beside):.1f} "
        f"max {1000 * max(beside):.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rss-bound-mb", type=float, default=20.0)
    parser.add_argument("--on-loop", action="store_true", help="tokenize on the episodes' loop (to compare)")
    parser.add_argument("--agent", action="store_true", help=argparse.SUPPRESS)  # run as the agent process
    args = parser.parse_args()
    if args.agent:
        asyncio.run(agent_main())
        return
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        raise SystemExit(asyncio.run(bench(args, Path(folder) / "results.jsonl")))


if __name__ == "__main__":
    main()
