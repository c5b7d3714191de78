"""Every change this package makes inside AWorld, each declared in `patch_table` and checked.

`apply()` runs them once (through `aworld_train.aworld.install()`); on an AWorld
version other than the one they were written for it refuses with the fix, rather
than patching code it has not seen; so it does on an mcp or loguru whose patched
source changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import aworld_train.aworld.episode_state as episode_state
from aworld_train.core.aworld_patch_table import AWORLD_VERSION
from aworld_train.core.patch_table import LIBRARY_PATCHES
from aworld_train.core.upstream import UnsupportedVersion, check_version, guard  # noqa: F401 (apply raises it)

_BUNDLED_VOCABS = {"openai", "qwen"}


def _offline_counter(original):
    def count(value, model="openai"):
        return original(value, model if str(model).lower() in _BUNDLED_VOCABS else "openai")

    return count


def _patch_token_counters() -> None:
    import aworld.logs.prompt_log as prompt_log
    from aworld.models import utils as model_utils

    for module in (model_utils, prompt_log):
        for name in ("num_tokens_from_string", "num_tokens_from_messages"):
            fn = getattr(module, name, None)
            if fn is not None and not getattr(fn, "_aworld_train_offline", False):
                patched = _offline_counter(fn)
                patched._aworld_train_offline = True
                setattr(module, name, patched)


def _route_file_logs() -> None:
    """Nothing of AWorld's lands in the user's working folder, whatever imported AWorld first.

    AWorld 0.3.2 opens its log files when it is imported, in `$AWORLD_LOG_PATH` or else
    `./logs`; `runtime` points that variable into our cache before importing AWorld, but a
    script that imported AWorld itself got `./logs`. Those file handlers are removed and what
    they wrote is moved to our log folder (loguru has no public API for a handler's sink).
    """
    import os
    from pathlib import Path

    from loguru import logger
    from loguru._file_sink import FileSink

    default_dir = Path.cwd() / "logs"
    target = Path(os.environ.get("AWORLD_LOG_PATH", default_dir))
    if target.resolve() == default_dir.resolve():
        return  # the user chose ./logs
    written = set()
    for handler_id, handler in list(logger._core.handlers.items()):
        sink = getattr(handler, "_sink", None)
        if isinstance(sink, FileSink) and Path(sink._path).parent == default_dir:
            logger.remove(handler_id)
            written.add(Path(sink._path))
    target.mkdir(parents=True, exist_ok=True)
    for path in written:
        if path.is_file():
            with (target / path.name).open("ab") as out:
                out.write(path.read_bytes())
            path.unlink()
    if written and default_dir.is_dir() and not any(default_dir.iterdir()):
        default_dir.rmdir()


def _no_failed_request_files() -> None:
    # AWorld writes each failed LLM request to ./failed_requests/*.json; an episode keeps the
    # error as its status and message instead.
    from aworld.agents.llm_agent import Agent

    async def keep_nothing(self, *args, **kwargs) -> None:
        return None

    Agent._save_failed_request_context = keep_nothing


def _quiet_loggers() -> None:
    # The mcp client logs a full traceback for every broken stream; episodes record it as a status.
    for name in ("mcp", "mcp.client", "mcp.client.streamable_http", "httpx"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


# node id -> (loop, event) of the message futures waiting on it; `_notify_finished` sets them
_node_waiters: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}


def _notify_finished(node) -> None:
    """Wake the futures waiting on `node` once its status is final (it may be set on another thread)."""
    if not _node_waiters or not node.has_finished():
        return
    try:
        here = asyncio.get_running_loop()
    except RuntimeError:
        here = None
    for loop, event in _node_waiters.get(node.node_id, ()):
        if loop is here:
            event.set()  # same loop: no wake-up of the selector needed
        elif not loop.is_closed():
            loop.call_soon_threadsafe(event.set)


async def _wait_for_node(self, timeout: float = 60.0) -> None:
    """MessageFuture's wait, woken when the node's state store records it finished.

    AWorld polls its state store every 100 ms for each message it waits on, and one agent
    step waits on several: that fixed cost, not the model or the tools, was most of an
    episode's wall time against a fast policy. The state store now wakes the waiter when it
    records the node finished; a poll every 100 ms stays as a fallback for a status set
    without a store update. Same contract: the future gets the finished node, the error, or
    a TimeoutError after `timeout` seconds.
    """
    deadline = time.monotonic() + (timeout if timeout is not None else 60.0)
    waiter = (asyncio.get_running_loop(), asyncio.Event())
    _node_waiters.setdefault(self.msg_id, []).append(waiter)
    try:
        while True:
            try:
                node = self.state_mng.get_node(self.msg_id)
                if node is not None and node.has_finished():
                    if not self.future.done():
                        self.future.set_result(node)
                    return
            except Exception as exc:
                if not self.future.done():
                    self.future.set_exception(exc)
                return
            left = deadline - time.monotonic()
            if left <= 0:
                break
            waiter[1].clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(waiter[1].wait(), min(left, 0.1))
    finally:
        waiters = _node_waiters.get(self.msg_id, [])
        if waiter in waiters:
            waiters.remove(waiter)
        if not waiters:
            _node_waiters.pop(self.msg_id, None)
    if not self.future.done():
        self.future.set_exception(
            TimeoutError(f"Message {self.msg_id} did not complete within {timeout} seconds")
        )


def _use_in_memory_history() -> None:
    """AWorld's default history store is a folder of JSON files that every history lookup
    reads in full: rollouts slowed down with every episode ever run. Episodes keep their
    history in memory instead, and `release_session` drops it when they end."""
    from aworld.memory.main import InMemoryMemoryStore, MemoryFactory, register_memory_provider

    from aworld_train.aworld.history import episode_memory

    class EpisodeHistoryStore(InMemoryMemoryStore):
        """AWorld's in-memory store, with the items also listed by session.

        Every history lookup of an episode names its session; the base store scanned the items
        of every episode in flight for each one (quadratic in the concurrency). A lookup by
        session now scans that session's items only, in the same order, with the same filter.
        """

        def __init__(self) -> None:
            super().__init__()
            self._by_session: dict[str | None, list] = {}

        def add(self, memory_item) -> None:
            super().add(memory_item)
            self._by_session.setdefault(memory_item.session_id, []).append(memory_item)

        def get_all(self, filters: dict | None = None) -> list:
            session_id = (filters or {}).get("session_id")
            if session_id is None:
                return super().get_all(filters)
            items = self._by_session.get(session_id, ())
            return [item for item in items if self._filter_memory_item(item, filters)]

        def update(self, memory_item) -> None:
            super().update(memory_item)
            own = self._by_session.get(memory_item.session_id, [])
            for items in (own, *(v for v in self._by_session.values() if v is not own)):
                for index, item in enumerate(items):
                    if item.id == memory_item.id:
                        items[index] = memory_item
                        return

        # InMemoryMemoryStore only marks deleted items; lookups would still scan them.
        def purge_session(self, session_id: str) -> None:
            self.memory_items = [item for item in self.memory_items if item.session_id != session_id]
            self._by_session.pop(session_id, None)

    # AWorld's own memory, its summaries awaited and written by the summarised agent (history.py)
    register_memory_provider("aworld", episode_memory)
    MemoryFactory.init(custom_memory_store=EpisodeHistoryStore())


def _patch_message_wait() -> None:
    from aworld.core.event.message_future import MessageFuture
    from aworld.runners.state_manager import InMemoryStateStorage

    MessageFuture._wait_internal = _wait_for_node
    original = InMemoryStateStorage.update
    if getattr(original, "_aworld_train_patched", False):
        return

    def update(self, node) -> None:
        original(self, node)
        _notify_finished(node)

    update._aworld_train_patched = True
    InMemoryStateStorage.update = update


_applied = False


def apply() -> None:
    """Apply every patch once; raises UnsupportedVersion on an AWorld they were not written for."""
    global _applied
    if _applied:
        return
    check_version("aworld", AWORLD_VERSION, "aworld-train's AWorld integration")
    guard(LIBRARY_PATCHES, "mcp", "aworld-train's MCP client trims")
    guard(LIBRARY_PATCHES, "loguru", "aworld-train's AWorld log routing")
    _patch_token_counters()
    _patch_message_wait()
    _use_in_memory_history()
    episode_state.patch_sandbox_del()
    _quiet_loggers()
    _route_file_logs()
    _no_failed_request_files()
    import aworld_train.aworld.trims as trims

    trims.apply()
    _applied = True
