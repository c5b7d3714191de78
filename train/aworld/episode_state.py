"""What one episode leaves in AWorld's process-wide registries, read and trimmed (patches declared in
`core/patch_table.py`, applied with the others by `patches.apply()`).

AWorld 0.3.2 keeps every agent, sandbox worker, state node and event queue it ever made: a long
run got slower with each batch (the runner cleans up the sandbox of every agent it knows of) and
grew without bound. These read and trim those registries; `framework.release_episode` calls them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools

from aworld_train.core.aworld_patch_table import AWORLD_VERSION
from aworld_train.core.upstream import check_version


@functools.cache  # once a process: it runs on every episode's release, and the version cannot change
def _read_against_this_aworld() -> None:
    """What follows was read against AWORLD_VERSION only: on another AWorld, refuse with the fix."""
    check_version("aworld", AWORLD_VERSION, "aworld-train's AWorld integration")


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


def patch_sandbox_del() -> None:
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
    _read_against_this_aworld()
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

    _read_against_this_aworld()
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
