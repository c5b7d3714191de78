"""Episodes in N worker processes that share one policy kept in the main process.

AWorld's agent loop is CPU-bound in one process (its task machinery, event bus and MCP client
run under one interpreter lock), so a fast policy waits on it. With `rollout.workers: N` the
episodes of a batch are spread over N spawned processes; each runs them as `run_episodes` would,
with a policy stand-in whose `generate` sends the prompt ids to the main process and awaits the
sampled ids. The main process serves those requests with its one policy (the local model batches
requests from all workers together), scores the trajectories with the reward there (a reward
loaded from a file need not be importable in a worker) and hands them to `on_done` as they come.

The processes start on a runtime's first batch and stay for its later ones; `close()` ends them.

A worker that dies mid-batch (killed, out of memory) costs only the episodes it was running: they
end as `worker_died` (a failure: no loss, no place in their group's baseline), a new process takes
its place, and the episodes it had not begun run there. Each worker has pipes of its own, whose
other ends only it holds: its death reads as the end of its pipe here at once (a queue shared by
all workers could be left locked, or holding half a message, by a process killed while writing),
and a worker whose main process died reads the end of its inbox and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import multiprocessing
import os
import signal
import sys
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aworld_train.rollout.episodes.episode import score
from aworld_train.rollout.episodes.runtime import RolloutRuntime
from aworld_train.rollout.episodes.trajectory import Trajectory
from aworld_train.rollout.episodes.worker_process import WorkerError, worker_main
from aworld_train.rollout.policies.client import derive_seed

if TYPE_CHECKING:
    from aworld_train.rollout.episodes.driver import AgentDriver, Reward
    from aworld_train.rollout.episodes.trajectory import Task

_STOP_WAIT_S = 10.0
WORKER_DIED = "worker_died"


class _Worker:
    """One spawned process, the pipe to it and the pipe from it (read by a thread of its own)."""

    _serials = itertools.count()

    def __init__(self, context, wid: int, runtime: RolloutRuntime, deliver: Callable) -> None:
        self.wid = wid
        self.serial = next(self._serials)
        inbox_out, inbox_in = context.Pipe(duplex=False)
        outbox_out, outbox_in = context.Pipe(duplex=False)
        self.process = context.Process(
            target=worker_main,
            args=(wid, runtime.renderer, runtime.stop_token_ids, runtime.settings, inbox_out, outbox_in),
            name=f"aworld-train-rollout-{wid}",
            daemon=True,
        )
        with _main_left_alone():
            self.process.start()
        # the child's ends: closed here, so that its death reads as the end of its pipe
        inbox_out.close()
        outbox_in.close()
        self.inbox, self.outbox = inbox_in, outbox_out
        self._send_lock = threading.Lock()
        self.started_any = False  # it began an episode
        self.after_idle_death = False  # it replaced a process that died before beginning one
        self.reader = threading.Thread(
            target=self._read, args=(deliver,), name=f"aworld-train-rollout-reader-{wid}", daemon=True
        )
        self.reader.start()

    def send(self, message: Any) -> bool:
        """False where the process is gone (its episodes are accounted for by its death)."""
        try:
            with self._send_lock:
                self.inbox.send(message)
        except (OSError, ValueError):  # broken pipe, or closed here
            return False
        return True

    def _read(self, deliver: Callable) -> None:
        while True:
            try:
                message = self.outbox.recv()
            except (EOFError, OSError):  # the process exited (or was killed), or closed here
                break
            deliver(self, message)
        self.process.join(_STOP_WAIT_S)
        deliver(self, ("dead", self.wid, self.process.exitcode))

    def describe(self) -> str:
        code = self.process.exitcode
        how = (
            f"killed by {signal.Signals(-code).name}"
            if code is not None and code < 0
            else f"exit code {code}"
        )
        return f"rollout worker {self.wid} (pid {self.process.pid}) exited mid-episode ({how})"

    def close(self) -> None:
        self.send(None)
        self.process.join(_STOP_WAIT_S)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join()
        self.reader.join(_STOP_WAIT_S)
        self.inbox.close()
        self.outbox.close()


class WorkerPool:
    """N spawned processes; their messages reach the batch being run (`sink`) in arrival order."""

    def __init__(self, runtime: RolloutRuntime, workers: int) -> None:
        self.context = multiprocessing.get_context("spawn")  # AWorld's loop threads must not be forked
        self.runtime = runtime
        self.size = workers
        self._lock = threading.Lock()
        self._sink: Callable[[_Worker, Any], None] | None = None
        self._backlog: list[tuple[_Worker, Any]] = []  # what arrived between batches (a death)
        self.workers = [self._spawn(wid) for wid in range(workers)]
        self.replaced = 0  # workers started in place of dead ones, over the pool's life

    @property
    def processes(self) -> list:
        return [w.process for w in self.workers]

    def _spawn(self, wid: int) -> _Worker:
        return _Worker(self.context, wid, self.runtime, self._deliver)

    def _deliver(self, worker: _Worker, message: Any) -> None:
        with self._lock:
            if self._sink is None:
                self._backlog.append((worker, message))
            else:
                self._sink(worker, message)

    def attach(self, sink: Callable[[_Worker, Any], None] | None) -> None:
        """Send the workers' messages to `sink` (None: keep them), the ones kept first."""
        with self._lock:
            self._sink = sink
            if sink is not None:
                backlog, self._backlog = self._backlog, []
                for worker, message in backlog:
                    sink(worker, message)

    def replace(self, dead: _Worker) -> _Worker:
        dead.reader.join(_STOP_WAIT_S)
        dead.inbox.close()
        dead.outbox.close()
        worker = self._spawn(dead.wid)
        self.workers[dead.wid] = worker
        self.replaced += 1
        return worker

    def close(self) -> None:
        for worker in self.workers:
            worker.close()


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


class _Batch:
    """One batch's jobs: which worker holds each, which began, which ended."""

    def __init__(self, jobs: list[tuple[Task, int | None]]) -> None:
        self.jobs = jobs
        self.owner: dict[int, _Worker] = {}
        self.started: set[int] = set()
        self.results: list[Trajectory | None] = [None] * len(jobs)
        self.busy: set[_Worker] = set()

    def deal(self, pool: WorkerPool, agent, share: int) -> None:
        """Every worker its share of the jobs, every pool.size-th from its own index."""
        for worker in pool.workers:
            mine = list(range(worker.wid, len(self.jobs), pool.size))
            if mine:
                self.give(worker, mine, agent, share)

    def give(self, worker: _Worker, indices: list[int], agent, share: int) -> None:
        jobs = [(i, self.jobs[i]) for i in indices]
        for i in indices:
            self.owner[i] = worker
        self.busy.add(worker)
        worker.send(("run", agent, jobs, share, dict(os.environ)))

    def worker_died(self, worker: _Worker, pool: WorkerPool, agent, share: int, finish: Callable) -> None:
        """`worker` died: its episodes in flight end worker_died, the ones it had not begun run on
        the process that replaces it."""
        self.busy.discard(worker)
        begun, waiting = self.unfinished(worker)
        for index in begun:  # the episodes in flight on it: lost, and said so
            task = self.jobs[index][0]
            finish(index, Trajectory(uuid.uuid4().hex, task.id, status=WORKER_DIED, error=worker.describe(),
                                     ground_truth=task.ground_truth))  # fmt: skip
        if not worker.started_any and worker.after_idle_death:
            # two processes in a row died before their first episode: they cannot run one
            raise WorkerError(f"{worker.describe()} before it began an episode, as its predecessor did; "
                              "the batch is lost")  # fmt: skip
        replacement = pool.replace(worker)
        replacement.after_idle_death = not worker.started_any
        if waiting:
            self.give(replacement, waiting, agent, share)

    def unfinished(self, worker: _Worker) -> tuple[list[int], list[int]]:
        """The jobs of `worker` without a result: (begun, not begun)."""
        mine = [i for i, w in self.owner.items() if w is worker and self.results[i] is None]
        return [i for i in mine if i in self.started], [i for i in mine if i not in self.started]


def _jobs(tasks: list[Task], samples_per_task: int, seed: int | None) -> list[tuple[Task, int | None]]:
    """Every task's samples, each with its seed (derived from the batch's, as `run_batch` does)."""
    return [
        (task, None if seed is None else derive_seed(seed, task.id, k))
        for task in tasks
        for k in range(samples_per_task)
    ]


def _ready_pool(runtime: RolloutRuntime) -> WorkerPool:
    """The runtime's worker processes, started on its first batch; one that died since the last
    batch replaced."""
    if runtime.pool is None:
        runtime.pool = WorkerPool(runtime, runtime.settings.workers)
    for worker in list(runtime.pool.workers):
        if not worker.process.is_alive():
            runtime.pool.replace(worker)
    return runtime.pool


async def run_in_workers(
    agent: AgentDriver,
    tasks: list[Task],
    runtime: RolloutRuntime,
    reward: Reward | None = None,
    *,
    samples_per_task: int = 1,
    on_done=None,
    seed: int | None = None,
) -> list[Trajectory]:
    """`run_episodes` over `rollout.workers` processes; same results, in task order."""
    pool = _ready_pool(runtime)
    batch = _Batch(_jobs(tasks, samples_per_task, seed))
    share = max(1, math.ceil(runtime.settings.concurrency / pool.size))
    loop = asyncio.get_running_loop()
    inbound: asyncio.Queue = asyncio.Queue()
    pool.attach(lambda worker, message: loop.call_soon_threadsafe(inbound.put_nowait, (worker, message)))
    batch.deal(pool, agent, share)

    def finish(index: int, traj: Trajectory) -> None:
        batch.results[index] = traj
        if on_done is not None:
            on_done(traj)

    serving: set[asyncio.Task] = set()
    broken = True
    try:
        while batch.busy:
            worker, message = await inbound.get()
            if worker is not pool.workers[worker.wid]:
                continue  # a process replaced before this batch began: its last words are old news
            kind = message[0]
            if kind == "generate":
                _, _, rid, prompt_ids, sampling = message
                job = loop.create_task(_serve(runtime, worker, rid, prompt_ids, sampling))
                serving.add(job)
                job.add_done_callback(serving.discard)
            elif kind == "started":
                batch.started.add(message[2])
                worker.started_any = True
            elif kind == "trajectory":
                _, _, index, traj = message
                score(traj, batch.jobs[index][0], reward)
                finish(index, traj)
            elif kind == "done":
                batch.busy.discard(worker)
            elif kind == "failed":
                raise WorkerError(f"rollout worker {worker.wid} failed:\n{message[2]}")
            elif kind == "dead":
                batch.worker_died(worker, pool, agent, share, finish)
        broken = False
    finally:
        pool.attach(None)
        for job in serving:
            job.cancel()
        # cancelled or failed mid-batch: its messages would mislead the next
        if broken and runtime.pool is pool:
            _discard(runtime)
    return [t for t in batch.results if t is not None]


def _discard(runtime: RolloutRuntime) -> None:
    """A pool whose batch broke holds stale episodes: the next batch starts fresh processes."""
    pool, runtime.pool = runtime.pool, None
    if pool is not None:
        pool.close()


async def _serve(runtime: RolloutRuntime, worker: _Worker, rid: int, prompt_ids: list[int], sampling) -> None:
    try:
        # worker processes serve a run of one policy (a policy per agent samples in this process)
        gen = await runtime.router.default.generate(prompt_ids, sampling)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        worker.send(("generation", rid, None, f"{type(exc).__name__}: {exc}"))
        return
    worker.send(("generation", rid, gen, None))  # nothing happens where the worker died meanwhile
