"""The local backend's asynchronous rollout (`algorithm.max_staleness` > 0).

Groups (one task, `group_size` episodes) are started in a thread of their own, on its own event
loop, in the order the synchronous loop draws the tasks, while the learner trains on groups that
finished. Admission is bounded as AReaL bounds it: with the weights at version v, at most
(max_staleness + v + 1) x batch groups are admitted over the run, those dropped as stale not
counted, so sampling runs at most `max_staleness` steps ahead of the learner. The weights change
in place under the policy's lock between two LLM calls: an episode in flight goes on with the new
ones (a partial rollout) and each call keeps its own version.

The learner takes finished groups as they come (`take`). A group whose oldest token is more than
`max_staleness` versions behind the weights is dropped, counted, and another takes its place.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aworld_train.rollout.episodes.trajectory import Trajectory

T = TypeVar("T")

CANCEL_WAIT_S = 10.0


@dataclass
class FinishedGroup:
    index: int  # its place in the run's stream of groups: step x batch + slot
    trajectories: list[Trajectory]

    @property
    def oldest_version(self) -> int | None:
        """The oldest weight version that sampled any of its tokens; None where none was sampled."""
        found = [t.min_version for t in self.trajectories if t.min_version is not None]
        return min(found, default=None)

    def stale(self, version: int, max_staleness: int) -> bool:
        oldest = self.oldest_version
        return oldest is not None and version - oldest > max_staleness


@dataclass
class Taken:
    """What the learner took for one step: the fresh groups in stream order, and those dropped."""

    groups: list[FinishedGroup]
    dropped: list[FinishedGroup] = field(default_factory=list)

    @property
    def trajectories(self) -> list[Trajectory]:
        return [t for g in self.groups for t in g.trajectories]


def admission_limit(max_staleness: int, version: int, batch: int) -> int:
    """Groups the run may have admitted (less those dropped) while the weights are at `version`."""
    return (max_staleness + version + 1) * batch


class GroupStream:
    """Groups sampled in a background thread: `start`, then `take` per step, then `close`.

    `run_group(index, limit)` samples group `index`; `limit` bounds the episodes of all groups
    at once (`rollout.concurrency`). `version()` reads the weights' version now. A resumed run
    starts at group `first_index` (its step x batch) with the version its checkpoint saved."""

    def __init__(
        self,
        run_group: Callable[[int, asyncio.Semaphore], Coroutine[Any, Any, list[Trajectory]]],
        version: Callable[[], int],
        batch: int,
        max_staleness: int,
        concurrency: int,
        group_size: int,
        first_index: int = 0,
        end_index: int | None = None,
    ) -> None:
        self.run_group = run_group
        self.version = version
        self.batch = batch
        self.max_staleness = max_staleness
        self.concurrency = concurrency
        self.group_size = group_size
        self.first_index = first_index
        self.end_index = end_index  # the run's last step's groups end there: none is sampled past it
        self.admitted = 0  # changed on the loop's thread only
        self.dropped = 0
        self._finished: queue.Queue[FinishedGroup | BaseException] = queue.Queue()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rollout", daemon=True)
        self._changed: asyncio.Event | None = None
        self._admitter: asyncio.Future | None = None
        self._groups: set[asyncio.Task] = set()

    # -- the learner's side -------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()
        self._admitter = asyncio.run_coroutine_threadsafe(self._admit(), self._loop)

    def take(self) -> Taken:
        """A step's groups: finished groups as they come, stale ones dropped, until `batch` are
        fresh or a step's worth (`batch`) went stale; the fresh ones in stream order."""
        taken = Taken([])
        while len(taken.groups) < self.batch and len(taken.dropped) < self.batch:
            group = self._finished.get()
            if isinstance(group, BaseException):
                raise group
            if group.stale(self.version(), self.max_staleness):
                taken.dropped.append(group)
                self._loop.call_soon_threadsafe(self._on_drop)
            else:
                taken.groups.append(group)
        taken.groups.sort(key=lambda g: g.index)
        return taken

    def weights_changed(self) -> None:
        """After the learner's update: the bound moved; admit what it allows now."""
        self._loop.call_soon_threadsafe(self._wake)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the rollout loop (evaluation: the policy serves one loop) and wait."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def close(self) -> None:
        """Cancel the groups still in flight (a run stopped early) and end the thread."""
        if not self._thread.is_alive():
            return
        if self._admitter is not None:
            self._admitter.cancel()
        asyncio.run_coroutine_threadsafe(self._cancel(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()

    # -- the loop's side ------------------------------------------------------------------------
    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def _on_drop(self) -> None:
        self.dropped += 1
        self._wake()

    async def _admit(self) -> None:
        self._changed = asyncio.Event()
        limit = asyncio.Semaphore(self.concurrency)
        # groups in flight: a step's, or as many as `concurrency` episodes keep busy; without it a
        # version that ran far ahead would admit groups without end
        slots = asyncio.Semaphore(max(self.batch, -(-self.concurrency // self.group_size)))
        index = self.first_index
        while True:
            await slots.acquire()
            # a wake-up can only run while this coroutine awaits, so none is lost between the
            # check and the wait
            while self.first_index + self.admitted - self.dropped >= self._limit():
                self._changed.clear()
                await self._changed.wait()
            self.admitted += 1
            task = asyncio.get_running_loop().create_task(self._sample(index, limit))
            self._groups.add(task)
            task.add_done_callback(self._groups.discard)
            task.add_done_callback(lambda _: slots.release())
            index += 1

    def _limit(self) -> int:
        bound = admission_limit(self.max_staleness, self.version(), self.batch)
        return bound if self.end_index is None else min(bound, self.end_index)

    async def _sample(self, index: int, limit: asyncio.Semaphore) -> None:
        try:
            trajectories = await self.run_group(index, limit)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the learner raises it at its next take
            self._finished.put(exc)
            return
        self._finished.put(FinishedGroup(index, trajectories))

    async def _cancel(self) -> None:
        pending = list(self._groups)
        for task in pending:
            task.cancel()
        if pending:
            # an agent framework's task may outlive its cancellation: the thread ends regardless
            await asyncio.wait(pending, timeout=CANCEL_WAIT_S)
