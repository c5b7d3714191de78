"""Episodes in N worker processes that share one policy kept in the main process.

AWorld's agent loop is CPU-bound in one process (its task machinery, event bus and MCP client
run under one interpreter lock), so a fast policy waits on it. With `rollout.workers: N` the
episodes of a batch are spread over N spawned processes; each runs them as `run_episodes` would,
with a policy stand-in whose `generate` sends the prompt ids to the main process and awaits the
sampled ids. The main process serves those requests with its one policy (the local model batches
requests from all workers together), scores the trajectories with the reward there (a reward
loaded from a file need not be importable in a worker) and hands them to `on_done` as they come.

The processes start on a runtime's first batch and stay for its later ones; `close()` ends them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import multiprocessing
import os
import queue
import signal
import sys
import threading
import traceback
from typing import TYPE_CHECKING, Any

from aworld_train.rollout.episode import Episode, score
from aworld_train.rollout.policy import Generation, SamplingParams, derive_seed
from aworld_train.rollout.runtime import RolloutRuntime

if TYPE_CHECKING:
    from aworld_train.rollout.driver import AgentDriver, Reward
    from aworld_train.rollout.trajectory import Task, Trajectory

# how often the main process checks that its workers are alive while it waits on them
_LIVENESS_S = 1.0
_STOP_WAIT_S = 10.0


class WorkerError(RuntimeError):
    pass


class WorkerPool:
    """N spawned processes, each with an inbox; one queue from all of them to the main process."""

    def __init__(self, runtime: RolloutRuntime, workers: int) -> None:
        context = multiprocessing.get_context("spawn")  # AWorld's loop threads must not be forked
        self.size = workers
        self.to_main = context.Queue()
        self.inboxes = [context.Queue() for _ in range(workers)]
        self.processes = [
            context.Process(
                target=_worker_main,
                args=(wid, runtime.renderer, runtime.stop_token_ids, runtime.rollout, inbox, self.to_main),
                name=f"aworld-train-rollout-{wid}",
                daemon=True,
            )
            for wid, inbox in enumerate(self.inboxes)
        ]
        with _main_left_alone():
            for process in self.processes:
                process.start()

    def dead(self) -> list[int]:
        return [wid for wid, p in enumerate(self.processes) if not p.is_alive()]

    def close(self) -> None:
        for inbox in self.inboxes:
            inbox.put(None)
        for process in self.processes:
            process.join(_STOP_WAIT_S)
            if process.is_alive():
                process.terminate()
                process.join()
        for q in (*self.inboxes, self.to_main):
            q.close()
            q.join_thread()


@contextlib.contextmanager
def _main_left_alone():
    """Start workers without re-running the parent's `__main__` in them.

    A spawned child first re-imports the parent's main script or module, so that functions
    defined there can be unpickled; a script that calls `AgentTrainer(...).evaluate()` without
    an `if __name__ == "__main__":` guard would then run again in each worker (and hang the
    start). Nothing a worker gets lives in `__main__` (the reward stays in this process), so
    the child is not told where `__main__` is while the workers start.
    """
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__spec__", "__file__") if main is not None and k in main.__dict__}
    if main is not None:
        main.__spec__ = None
        main.__dict__.pop("__file__", None)
    try:
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)
            if "__spec__" not in saved:
                main.__dict__.pop("__spec__", None)


async def run_in_workers(
    agent: AgentDriver,
    tasks: list[Task],
    runtime: RolloutRuntime,
    reward: Reward | None = None,
    samples_per_task: int = 1,
    on_done=None,
    seed: int | None = None,
) -> list[Trajectory]:
    """`run_episodes` over `rollout.workers` processes; same results, in task order."""
    if runtime.pool is None:
        runtime.pool = WorkerPool(runtime, runtime.rollout.workers)
    pool: WorkerPool = runtime.pool
    jobs = [
        (task, None if seed is None else derive_seed(seed, task.id, k))
        for task in tasks
        for k in range(samples_per_task)
    ]
    results: list[Trajectory | None] = [None] * len(jobs)
    share = max(1, math.ceil(runtime.rollout.concurrency / pool.size))
    busy = set()
    for wid, inbox in enumerate(pool.inboxes):
        mine = [(i, jobs[i]) for i in range(wid, len(jobs), pool.size)]
        if mine:
            inbox.put(("run", agent, mine, share, dict(os.environ)))
            busy.add(wid)

    loop = asyncio.get_running_loop()
    inbound: asyncio.Queue = asyncio.Queue()
    stop = threading.Event()
    reader = threading.Thread(target=_read_main, args=(pool, loop, inbound, stop), daemon=True)
    reader.start()
    serving: set[asyncio.Task] = set()
    try:
        while busy:
            message = await inbound.get()
            kind = message[0]
            if kind == "generate":
                _, wid, rid, prompt_ids, sampling = message
                job = loop.create_task(_serve(runtime, pool, wid, rid, prompt_ids, sampling))
                serving.add(job)
                job.add_done_callback(serving.discard)
            elif kind == "trajectory":
                _, _, index, traj = message
                score(traj, jobs[index][0], reward)
                results[index] = traj
                if on_done is not None:
                    on_done(traj)
            elif kind == "done":
                busy.discard(message[1])
            elif kind == "failed":
                _discard(runtime)
                raise WorkerError(f"rollout worker {message[1]} failed:\n{message[2]}")
            elif kind == "dead":
                _discard(runtime)
                raise WorkerError(
                    f"rollout worker(s) {message[1]} exited mid-batch (killed, or out of memory?); "
                    "the batch is lost"
                )
    finally:
        stop.set()
        reader.join()
        for job in serving:
            job.cancel()
        if (
            busy and runtime.pool is pool
        ):  # cancelled or failed mid-batch: its messages would mislead the next
            _discard(runtime)
    return [t for t in results if t is not None]


def _discard(runtime: RolloutRuntime) -> None:
    """A pool whose batch broke holds stale episodes: the next batch starts fresh processes."""
    pool, runtime.pool = runtime.pool, None
    if pool is not None:
        pool.close()


async def _serve(
    runtime: RolloutRuntime, pool: WorkerPool, wid: int, rid: int, prompt_ids: list[int], sampling
) -> None:
    try:
        gen = await runtime.policy.generate(prompt_ids, sampling)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        pool.inboxes[wid].put(("generation", rid, None, f"{type(exc).__name__}: {exc}"))
        return
    pool.inboxes[wid].put(("generation", rid, gen, None))


def _read_main(pool: WorkerPool, loop, inbound: asyncio.Queue, stop: threading.Event) -> None:
    """Thread: the workers' messages into the event loop; a dead worker becomes a message too."""
    while not stop.is_set():
        try:
            message = pool.to_main.get(timeout=_LIVENESS_S)
        except queue.Empty:
            dead = pool.dead()
            if dead:
                loop.call_soon_threadsafe(inbound.put_nowait, ("dead", dead))
                return
            continue
        loop.call_soon_threadsafe(inbound.put_nowait, message)


# -- in the worker ------------------------------------------------------------------------------


class RemotePolicy:
    """The worker's PolicyClient: each call is served by the main process's policy."""

    def __init__(self, wid: int, to_main) -> None:
        self.wid = wid
        self.to_main = to_main
        self._ids = itertools.count()
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future]] = {}

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        loop = asyncio.get_running_loop()
        rid = next(self._ids)
        future = loop.create_future()
        self._pending[rid] = (loop, future)
        try:
            self.to_main.put(("generate", self.wid, rid, list(prompt_ids), sampling))
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


def _worker_main(wid: int, renderer, stop_token_ids, rollout, inbox, to_main) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process decides when to stop
    policy = RemotePolicy(wid, to_main)
    runtime = RolloutRuntime(
        policy, renderer, list(stop_token_ids), rollout.model_copy(update={"workers": 1})
    )
    batches: queue.Queue = queue.Queue()

    def read_inbox() -> None:
        while True:
            message = inbox.get()
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
            asyncio.run(_run_batch(wid, agent, jobs, concurrency, runtime, to_main))
        except BaseException:
            to_main.put(("failed", wid, traceback.format_exc()))
            continue
        to_main.put(("done", wid))


async def _run_batch(
    wid: int, agent, jobs: list[tuple[int, Any]], concurrency: int, runtime, to_main
) -> None:
    limit = asyncio.Semaphore(concurrency)

    async def one(index: int, task, seed: int | None) -> None:
        async with limit:
            traj = await Episode(agent, task, runtime, seed=seed).run()  # scored in the main process
        to_main.put(("trajectory", wid, index, traj))

    await asyncio.gather(*(one(i, task, seed) for i, (task, seed) in jobs))
