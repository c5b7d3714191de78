"""A rollout worker's side (rollout/episodes/workers.py spawns it): it runs its share of a batch's
episodes as `run_episodes` would, with a policy stand-in whose calls the main process serves."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import threading
import traceback
from collections.abc import Callable
from typing import Any

from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.runtime import RolloutRuntime
from aworld_train.rollout.policies.client import Generation, SamplingParams
from aworld_train.rollout.policies.router import PolicyRouter


class WorkerError(RuntimeError):
    """A rollout worker that cannot go on (its batch is lost), or a policy call the main process
    could not serve."""


class RemotePolicy:
    """The worker's PolicyClient: each call is served by the main process's policy."""

    def __init__(self, wid: int, send: Callable[[Any], None]) -> None:
        self.wid = wid
        self.send = send
        self._ids = itertools.count()
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future]] = {}

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        loop = asyncio.get_running_loop()
        rid = next(self._ids)
        future = loop.create_future()
        self._pending[rid] = (loop, future)
        try:
            self.send(("generate", self.wid, rid, list(prompt_ids), sampling))
            return await future
        finally:
            self._pending.pop(rid, None)

    def answer(self, rid: int, gen: Generation | None, error: str | None) -> None:
        """From the inbox thread: complete the call `rid` (gone if its episode was cancelled)."""
        entry = self._pending.get(rid)
        if entry is None:
            return
        loop, future = entry

        def settle() -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(WorkerError(f"the policy in the main process raised {error}"))
            else:
                future.set_result(gen)

        loop.call_soon_threadsafe(settle)


def worker_main(wid: int, renderer, stop_token_ids, rollout, inbox, outbox) -> None:
    import queue

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process decides when to stop
    lock = threading.Lock()

    def send(message: Any) -> None:
        with lock:
            outbox.send(message)

    policy = RemotePolicy(wid, send)
    runtime = RolloutRuntime(
        PolicyRouter(policy), renderer, list(stop_token_ids), rollout.model_copy(update={"workers": 1})
    )
    batches: queue.Queue = queue.Queue()

    def read_inbox() -> None:
        while True:
            try:
                message = inbox.recv()
            except (EOFError, OSError):
                os._exit(1)  # the main process is gone: nothing here can reach it any more
            if message is None:
                batches.put(None)
                return
            if message[0] == "generation":
                policy.answer(*message[1:])
            else:
                batches.put(message)

    threading.Thread(target=read_inbox, daemon=True).start()
    while True:
        batch = batches.get()
        if batch is None:
            return
        _, agent, jobs, concurrency, env = batch
        os.environ.update(env)  # the tool servers' URLs of this run, set in the main process
        try:
            asyncio.run(_run_batch(wid, agent, jobs, concurrency, runtime=runtime, send=send))
        except BaseException:
            send(("failed", wid, traceback.format_exc()))
            continue
        send(("done", wid))


async def _run_batch(
    wid: int, agent, jobs: list[tuple[int, Any]], concurrency: int, *, runtime, send: Callable[[Any], None]
) -> None:
    limit = asyncio.Semaphore(concurrency)

    async def one(index: int, task, seed: int | None) -> None:
        async with limit:
            send(("started", wid, index))  # from here, the episode is lost if this process dies
            traj = await Episode(agent, task, runtime, seed=seed).run()  # scored in the main process
        send(("trajectory", wid, index, traj))

    await asyncio.gather(*(one(i, task, seed) for i, (task, seed) in jobs))
