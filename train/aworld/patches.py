"""Every change this package makes inside AWorld, each declared in `patch_table` and checked.

`apply()` runs them once (through `aworld_train.aworld.install()`); on an AWorld
version other than the one they were written for it refuses with the fix, rather
than patching code it has not seen; so it does on an mcp or loguru whose patched
source changed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time

from aworld_train.core.patch_table import AWORLD_VERSION, LIBRARY_PATCHES
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
    from aworld.memory.main import InMemoryMemoryStore, MemoryFactory

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


# -- what one episode leaves in AWorld's process-wide registries -------------------------------
# AWorld 0.3.2 keeps every agent, sandbox worker, state node and event queue it ever made: a long
# run got slower with each batch (the runner cleans up the sandbox of every agent it knows of) and
# grew without bound. These read and trim those registries; `runtime.release_episode` calls them.

# How long an episode's release waits for its sandbox workers to close their MCP sessions and stop,
# and for a cancelled turn to unwind; a hung tool server must not hold the run.
WORKER_STOP_WAIT_S = 2.0
RELEASE_TIMEOUT_S = 5.0


def _sandbox_manager():
    from aworld.sandbox.runtime.manager import SandboxManager

    return SandboxManager.get_instance()


def _state_storages() -> list:
    from aworld.runners.state_manager import (
        EventRuntimeStateManager,
        InMemoryStateStorage,
        RuntimeStateManager,
    )

    storages = [RuntimeStateManager.instance().storage, EventRuntimeStateManager.instance().storage]
    unique = {id(s): s for s in storages if isinstance(s, InMemoryStateStorage)}
    return list(unique.values())


def _eventbuses() -> list:
    import aworld.events as events

    return [bus for bus in (events.eventbus, events.streaming_eventbus) if bus is not None]


def _forget_agent(agent) -> None:
    from aworld.core.agent.base import AgentFactory

    agent_id = agent.id()
    # only this instance's own entries: a class registered under a name stays
    if AgentFactory._agent_instance.get(agent_id) is agent:
        for table in (
            AgentFactory._agent_instance,
            AgentFactory._cls,
            AgentFactory._desc,
            AgentFactory._agent_conf,
            AgentFactory._ext_info,
            AgentFactory._prio,
        ):
            table.pop(agent_id, None)


# workers stopped while a tool call still held them: they close their session and end on their own
_closing_workers: set = set()


async def _close_sandbox(sandbox) -> None:
    """Close the MCP sessions a cancelled turn left open and stop the sandbox's workers.

    AWorld runs each (sandbox, server) pair's MCP work in one worker task on its sandbox loop
    threads, one job at a time, and never stops it. The close (AWorld sleeps 100 ms, then sends
    DELETE) and the stop are queued to that worker, so they run in the task that opened the
    session. A worker still inside a hung tool call gets to them when that call returns: it is
    waited for up to WORKER_STOP_WAIT_S and then left to finish in the background.
    """
    manager = _sandbox_manager()
    manager.unregister_sandbox(sandbox.sandbox_id)
    sandbox._aworld_train_released = True
    servers = getattr(sandbox, "_mcpservers", None)
    prefix = f"{sandbox.sandbox_id}:"
    for key in [k for k in list(manager._registry) if k == sandbox.sandbox_id or k.startswith(prefix)]:
        ctx = manager._registry.pop(key, None)
        if ctx is None or ctx.loop.is_closed():
            continue
        name = key[len(prefix) :] if key.startswith(prefix) else None
        jobs = []
        if servers is not None and name in (getattr(servers, "server_instances", None) or {}):
            jobs.append((servers._cleanup_one_server, (name,), {}, concurrent.futures.Future()))
        jobs.append((None, None, None, None))  # AWorld's own stop sentinel for its worker loop
        for job in jobs:
            ctx.loop.call_soon_threadsafe(ctx.queue.put_nowait, job)
        _closing_workers.add(ctx.worker_task)
        ctx.loop.call_soon_threadsafe(ctx.worker_task.add_done_callback, _closing_workers.discard)
        await _wait_on_loop(ctx.loop, ctx.worker_task, WORKER_STOP_WAIT_S)


def _released_sandbox_del(original):
    def __del__(self) -> None:
        # A released sandbox has nothing left to close. AWorld's own __del__ would warn for each one
        # collected inside a running loop, and outside one would open, set and close a new loop.
        if not getattr(self, "_aworld_train_released", False):
            original(self)

    __del__._aworld_train_patched = True
    return __del__


def _patch_sandbox_del() -> None:
    from aworld.sandbox.implementations.sandbox import Sandbox

    if not getattr(Sandbox.__del__, "_aworld_train_patched", False):
        Sandbox.__del__ = _released_sandbox_del(Sandbox.__del__)


def claim_sandbox(agent, task_id: str) -> None:
    """Mark the agent's sandbox as used by AWorld task `task_id` before the task runs.

    At the end of every task AWorld's runner cleans up the sandbox of every agent it knows of
    whose `task_list` is empty or holds only that task: without a claim, each episode that ended
    closed the MCP sessions of all the episodes still running. The claim makes the runner clean
    up only the sandbox of its own agent.
    """
    sandbox = getattr(agent, "sandbox", None)
    if sandbox is None:
        return
    if sandbox.metadata is None:
        sandbox.metadata = {}
    task_list = sandbox.metadata.setdefault("task_list", [])
    if task_id not in task_list:
        task_list.append(task_id)


async def _wait_on_loop(loop, task, timeout: float) -> None:
    async def wait() -> None:
        await asyncio.wait({task}, timeout=timeout)

    await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(wait(), loop))


def _forget_session_state(session_id: str, task_ids: set[str]) -> None:
    """Drop the episode's state nodes and event queues.

    AWorld 0.3.2 files most nodes under an empty session id rather than the task's, so nodes
    are matched by their AWorld task id as well as by session.
    """
    for storage in _state_storages():
        for node in storage._session_nodes.get(session_id, []):
            if node.task_id:
                task_ids.add(node.task_id)
        for sid in list(storage._session_nodes):
            nodes = storage._session_nodes[sid]
            kept = [n for n in nodes if sid != session_id and n.task_id not in task_ids]
            if len(kept) == len(nodes):
                continue
            for node in nodes:
                if node.task_id in task_ids or sid == session_id:
                    storage._nodes.pop(node.node_id, None)
            if kept:
                storage._session_nodes[sid] = kept
            else:
                del storage._session_nodes[sid]
                if sid in storage._ordered_session_ids:
                    storage._ordered_session_ids.remove(sid)
    # every tool AWorld makes registers itself, by name, in one process-wide executor: the last
    # episode's tool (and through its context the whole episode) stayed there
    from aworld.core.tool import base as tool_base

    tools = tool_base.action_executor.tools
    for name, tool in list(tools.items()):
        if getattr(getattr(tool, "context", None), "task_id", None) in task_ids:
            tools.pop(name, None)
    for bus in _eventbuses():
        for task_id in task_ids:
            bus._message_queue.pop(task_id, None)
            bus._subscribers.pop(task_id, None)
            bus._transformer.pop(task_id, None)


async def release_episode_state(agents: list, session_id: str, task_ids: set[str]) -> None:
    """Remove one finished episode's agents, sandboxes, state nodes and event queues from AWorld."""
    apply()  # what follows was read against AWORLD_VERSION only
    for agent in agents:
        _forget_agent(agent)
        sandbox = getattr(agent, "sandbox", None)
        if sandbox is not None:
            await _close_sandbox(sandbox)
    _forget_session_state(session_id, set(task_ids))


def _sandbox_loop_tasks() -> int:
    """Tasks alive on AWorld's sandbox loop threads (MCP workers and their connections)."""
    from aworld.sandbox.runtime.loop_pool import SandboxLoopPool

    async def count() -> int:
        return len(asyncio.all_tasks()) - 1  # less this count itself

    if SandboxLoopPool._instance is None:
        return 0
    loops = SandboxLoopPool._instance._loops
    return sum(asyncio.run_coroutine_threadsafe(count(), loop).result(5.0) for loop in loops)


def registry_sizes() -> dict[str, int]:
    """How many entries AWorld's process-wide registries hold now (for benches and tests)."""
    from aworld.core.agent.base import AgentFactory

    apply()
    manager = _sandbox_manager()
    storages = _state_storages()
    return {
        "sandbox_loop_tasks": _sandbox_loop_tasks(),
        "agents": len(AgentFactory._agent_instance),
        "sandboxes": len(manager._sandbox_instances),
        "sandbox_workers": len(manager._registry) + len(_closing_workers),
        "state_nodes": sum(len(s._nodes) for s in storages),
        "state_sessions": sum(len(s._session_nodes) for s in storages),
        "event_queues": sum(len(b._message_queue) for b in _eventbuses()),
    }


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
    _patch_sandbox_del()
    _quiet_loggers()
    _route_file_logs()
    _no_failed_request_files()
    import aworld_train.aworld.trims as trims

    trims.apply()
    _applied = True
