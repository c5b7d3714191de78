"""A long run in one process: does every batch cost what the second one did?

Batches of episodes of the real calculator agent against the calculator MCP server over
HTTP, with a fake policy (fixed latency, scripted replies, as in `rollout_overhead.py`),
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
import json
import os
import re
import time

import psutil

SHOWN = ("agents", "sandboxes", "sandbox_workers", "sandbox_loop_tasks", "state_nodes", "event_queues")


def fake_policy(tokenizer, latency: float):
    """Calls the calculator tool for the task's expression, then answers with its result."""
    from aworld_train.rollout.policies.client import ScriptedPolicy

    def reply(prompt_ids: list[int]) -> str:
        text = tokenizer.decode(prompt_ids)
        tail = text[text.rindex("What is") :]
        results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", tail)
        if results:
            return f"The answer is {results[-1]}."
        expression = re.findall(r"What is ([^?]+)\?", tail)[0]
        return (
            "<tool_call>\n"
            + json.dumps({"name": "calculate", "arguments": {"expression": expression}})
            + "\n</tool_call>"
        )

    return ScriptedPolicy(tokenizer, reply, tokenizer.convert_tokens_to_ids("<|im_end|>"), latency_s=latency)


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

    from aworld_train.agents.calculator import build_agent
    from aworld_train.aworld import install
    from aworld_train.aworld.framework import registry_sizes
    from aworld_train.aworld.specs import load_agent_spec
    from aworld_train.env.launcher import start_server
    from aworld_train.inputs.config import RolloutSettings
    from aworld_train.rollout.episodes.batch import run_episodes
    from aworld_train.rollout.episodes.runtime import RolloutRuntime
    from aworld_train.rollout.episodes.trajectory import Task
    from aworld_train.rollout.policies.models import load_tokenizer
    from aworld_train.rollout.tokens.templates.renderer import ChatRenderer
    from aworld_train.rollout.tokens.turns.stops import stop_token_ids

    install()
    if args.keep_registries:
        keep_registries()
    cleanups = count_cleanups()
    tokenizer = load_tokenizer("embedded:smollm2-135m")
    # generous tool and episode limits: a loaded machine must not turn slow calls into failed episodes
    settings = RolloutSettings(
        tool_block="never", concurrency=args.concurrency, episode_timeout_s=600, tool_timeout_s=300
    )
    runtime = RolloutRuntime(
        fake_policy(tokenizer, args.latency),
        ChatRenderer(tokenizer, tool_block="never"),
        stop_token_ids(tokenizer),
        settings,
    )
    process = psutil.Process()
    with start_server("calculator") as server:
        os.environ["CALCULATOR_MCP_URL"] = server.url
        port = int(re.findall(r":(\d+)", server.url)[0])
        spec = load_agent_spec(build_agent(url=server.url)).model_copy(update={"few_shot": []})
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
            tasks = [
                Task(f"{b}-{i}", [f"What is {b * 1000 + i} * 7?"], ground_truth=(b * 1000 + i) * 7)
                for i in range(args.episodes)
            ]
            cleanups[0] = 0
            cpu = sum(process.cpu_times()[:2])
            started = time.perf_counter()
            trajs = asyncio.run(run_episodes(spec, tasks, runtime))
            seconds = time.perf_counter() - started
            cpu = sum(process.cpu_times()[:2]) - cpu
            bad = [t.status for t in trajs if t.status != "ok" or not t.tool_calls]
            assert not bad, f"batch {b}: {bad[:5]}"
            sizes = registry_sizes()
            print(
                f"{b + 1:>5}{seconds:>8.2f}{len(trajs) / seconds:>7.1f}{cpu:>7.1f}"
                f"{process.memory_info().rss / 2**20:>8.0f}{open_connections(port):>6}"
                f"{cleanups[0] / len(trajs):>11.1f}  " + " ".join(f"{sizes[k]:>{len(k)}}" for k in SHOWN),
                flush=True,
            )


if __name__ == "__main__":
    main()
