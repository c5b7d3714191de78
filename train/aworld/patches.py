"""Every change this package makes inside AWorld, each checked against the version it was written for.

`apply()` runs them once (through `aworld_train.aworld.install()`); on an AWorld
version other than the one they were written for it refuses with the fix, rather
than patching code it has not seen.
"""

from __future__ import annotations

import asyncio
import logging
import time
from importlib.metadata import PackageNotFoundError, version

from aworld_train.errors import AworldTrainError

# The AWorld release every patch below was read against.
AWORLD_VERSION = "0.3.2"


class UnsupportedVersion(AworldTrainError):
    pass


def installed_version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def check_version(package: str, expected: str, what: str) -> None:
    found = installed_version(package)
    if found != expected:
        raise UnsupportedVersion(
            f"{what} was written for {package}=={expected}, but {package} {found or 'is not installed'} "
            f"is installed: pip install '{package}=={expected}'"
        )


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


def _quiet_loggers() -> None:
    # The mcp client logs a full traceback for every broken stream; episodes record it as a status.
    for name in ("mcp", "mcp.client", "mcp.client.streamable_http", "httpx"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


async def _wait_for_node(self, timeout: float = 60.0) -> None:
    """MessageFuture's wait, polling with a short interval that backs off to AWorld's 100 ms.

    AWorld checks its state store every 100 ms for each message it waits on, and one
    agent step waits on several: that fixed cost, not the model or the tools, was most of
    an episode's wall time against a fast policy. Same contract: the future gets the
    finished node, the error, or a TimeoutError after `timeout` seconds.
    """
    deadline = time.monotonic() + (timeout if timeout is not None else 60.0)
    interval = 0.002
    while time.monotonic() < deadline:
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
        await asyncio.sleep(interval)
        interval = min(interval * 1.5, 0.1)
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
        # InMemoryMemoryStore only marks deleted items; lookups would still scan them.
        def purge_session(self, session_id: str) -> None:
            self.memory_items = [item for item in self.memory_items if item.session_id != session_id]

    MemoryFactory.init(custom_memory_store=EpisodeHistoryStore())


def _patch_message_wait() -> None:
    from aworld.core.event.message_future import MessageFuture

    MessageFuture._wait_internal = _wait_for_node


_applied = False


def apply() -> None:
    """Apply every patch once; raises UnsupportedVersion on an AWorld they were not written for."""
    global _applied
    if _applied:
        return
    check_version("aworld", AWORLD_VERSION, "aworld-train's AWorld integration")
    _patch_token_counters()
    _patch_message_wait()
    _use_in_memory_history()
    _quiet_loggers()
    _applied = True
