"""A finished episode, however it ended, leaves nothing in AWorld's process-wide registries,
our own tables, the event loops or the connections to its MCP server: batch after batch of a
long run starts where the first one did. Real AWorld agent, real calculator server over HTTP."""

from __future__ import annotations

import asyncio
import gc
import json
import re
import weakref
from urllib.parse import urlparse

import psutil
import pytest

from aworld_train.aworld import provider
from aworld_train.aworld.framework import registry_sizes
from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.policies.client import Generation, SamplingParams, ScriptedPolicy


class BatchPolicy:
    """Answers calculator questions; hangs after the tool call on 'hang' and 'cancel' tasks
    (the MCP session is open then), and fails on 'fail' tasks."""

    def __init__(self, tokenizer, im_end: int) -> None:
        self.tokenizer = tokenizer
        self.scripted = ScriptedPolicy(tokenizer, self._reply, im_end)
        self.hanging: set[str] = set()

    def _reply(self, prompt_ids: list[int]) -> str:
        tail = self.tokenizer.decode(prompt_ids).rsplit("Task ", 1)[1]
        results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", tail)
        if results:
            return f"The answer is {results[-1]}."
        expression = re.findall(r"What is ([^?]+)\?", tail)[0]
        return (
            "<tool_call>\n"
            + json.dumps({"name": "calculate", "arguments": {"expression": expression}})
            + "\n</tool_call>"
        )

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        tail = self.tokenizer.decode(prompt_ids).rsplit("Task ", 1)[1]
        name = tail.split(": ", 1)[0]
        if name.startswith("fail"):
            raise RuntimeError("policy server went away")
        if name.startswith(("hang", "cancel")) and "<tool_response>" in tail:
            self.hanging.add(name)
            await asyncio.Event().wait()
        return await self.scripted.generate(prompt_ids, sampling)


def connections_to(url: str) -> int:
    port = urlparse(url).port
    return sum(
        1
        for c in psutil.Process().net_connections(kind="tcp")
        if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
    )


def main_loop_tasks() -> list[str]:
    return sorted(t.get_coro().__qualname__ for t in asyncio.all_tasks() if t is not asyncio.current_task())


async def settled_registry_sizes(limit_s: float = 20.0) -> dict[str, int]:
    """Registry sizes once they stop changing: sandbox workers of earlier tests close in the background."""
    loop = asyncio.get_running_loop()
    sizes, deadline, stable_since = registry_sizes(), loop.time() + limit_s, loop.time()
    while loop.time() < deadline and loop.time() - stable_since < 1.0:
        await asyncio.sleep(0.2)
        now = registry_sizes()
        if now != sizes:
            sizes, stable_since = now, loop.time()
    return sizes


@pytest.fixture
def cleanup_calls(monkeypatch):
    from aworld.sandbox.implementations.sandbox import Sandbox

    calls = [0]
    original = Sandbox.cleanup

    async def counted(self):
        calls[0] += 1
        return await original(self)

    monkeypatch.setattr(Sandbox, "cleanup", counted)
    return calls


async def test_two_batches_leave_registries_connections_and_tasks_as_they_found_them(
    tokenizer, im_end, calculator_spec, calculator_server, make_runtime, cleanup_calls
):
    spec = calculator_spec.model_copy(update={"few_shot": []})
    policy = BatchPolicy(tokenizer, im_end)
    runtime = make_runtime(policy, episode_timeout_s=60)
    # a hung policy call stops the agent clock: only the wall-clock limit ends that episode
    short = make_runtime(policy, episode_timeout_s=8, episode_wall_timeout_s=8)

    async def batch(b: int) -> tuple[list, list]:
        tasks = [(f"ok:{b}-{i}", f"{b * 10 + i} * 7", runtime) for i in range(5)]
        tasks += [
            (f"hang:{b}", "6 * 7", short),
            (f"cancel:{b}", "8 * 7", runtime),
            (f"fail:{b}", "9 * 7", runtime),
        ]
        episodes = [
            Episode(spec, Task(name, [f"Task {name}: What is {expr}?"], ground_truth=0), rt)
            for name, expr, rt in tasks
        ]
        running = [asyncio.ensure_future(e.run()) for e in episodes]
        for _ in range(600):  # both made their tool call: their MCP sessions are open
            if {f"hang:{b}", f"cancel:{b}"} <= policy.hanging or running[6].done():
                break
            await asyncio.sleep(0.05)
        assert f"cancel:{b}" in policy.hanging, [r.result().status for r in running if r.done()]
        agents = [weakref.ref(e._run.agents[0]) for e in episodes]  # the AWorld Agent of each
        running[6].cancel()
        results = await asyncio.gather(*running, return_exceptions=True)
        return results, agents

    start = await settled_registry_sizes()
    start_tasks, start_conns = main_loop_tasks(), connections_to(calculator_server.url)
    earlier: list = []
    for b in (1, 2):
        cleanup_calls[0] = 0
        results, agents = await batch(b)
        statuses = [r.status if not isinstance(r, BaseException) else type(r).__name__ for r in results]
        assert statuses == ["ok"] * 5 + ["timeout", "CancelledError", "error"]
        assert all(r.tool_calls[0].result == str((b * 10 + i) * 7) for i, r in enumerate(results[:5]))
        # nothing grows (an earlier test's worker that was still closing may be gone by now)
        grown = {k: (start[k], v) for k, v in registry_sizes().items() if v > start[k]}
        assert not grown, f"batch {b}: (before, after) {grown}"
        assert provider.active_episodes() == 0
        assert main_loop_tasks() == start_tasks
        assert connections_to(calculator_server.url) == start_conns
        del results
        gc.collect()
        # a batch's agents do not pile up: those of the batch before are gone
        assert [a() for a in earlier] == [None] * len(earlier), "an earlier batch's agent is still referenced"
        earlier = agents
        # AWorld's runner cleans up the sandbox of every agent it knows of: this batch's only, now
        assert cleanup_calls[0] <= 8 * 8, f"batch {b}: {cleanup_calls[0]} Sandbox.cleanup calls"
