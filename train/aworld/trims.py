"""Work AWorld does on every episode that training never reads, taken off the rollout path.

None of these changes what the agent does: its prompt, memory, tool calls through its MCP
client and its turns stay AWorld's own. What goes (measured by `bench/rollout_profile.py`):

- log records below AWORLD_TRAIN_AWORLD_LOG_LEVEL (default WARNING): AWorld's logger inspects
  the caller's frame and module for every record, DEBUG ones included, before its sinks drop
  them; and its prompt logs, which render the whole context and count its tokens per LLM call;
- an SSL context per MCP session: httpx loads the CA bundle for every new client, even for a
  plain-http server; one context, built the same way, now serves every session;
- the 100 ms sleep in AWorld's MCP session close, which every episode's end waited for;
- `inspect.stack()` in AWorld's token-usage accounting, which read the source of every frame
  on the stack at each LLM call (a frame walk finds the same caller).

Applied by `patches.apply()`, on the AWorld version it checks; each change is a row of
`patch_table`, with the upstream source it was copied from or replaces.
"""

from __future__ import annotations

import os
from typing import Any

# AWorld's levels (loguru's), lowest first
_LEVELS = ("TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL")
LOG_LEVEL_VARIABLE = "AWORLD_TRAIN_AWORLD_LOG_LEVEL"


def aworld_log_level() -> str:
    level = os.environ.get(LOG_LEVEL_VARIABLE, "WARNING").strip().upper()
    if level not in _LEVELS:
        from aworld_train.core.errors import ConfigError

        raise ConfigError(
            f"{LOG_LEVEL_VARIABLE}={level!r} is not a log level; use one of {', '.join(_LEVELS)}"
        )
    return level


def _drop(*args: Any, **kwargs: Any) -> None:
    return None


def quiet_aworld_logs(level: str) -> None:
    """Records below `level` return before AWorld builds them; prompt logs go unless INFO is kept."""
    from aworld.logs import util
    from aworld.logs.prompt_log import PromptLogger

    below = _LEVELS[: _LEVELS.index(level)]
    loggers = [value for value in vars(util).values() if isinstance(value, util.AWorldLogger)]
    for logger in loggers:
        for name in below:
            setattr(logger, name.lower(), _drop)
    if "INFO" in below:
        # each renders the context (and counts its tokens) only to log it at INFO
        for name in ("log_agent_call_llm_messages", "log_formatted_parameters", "log_summary_memory"):
            if hasattr(PromptLogger, name):
                setattr(PromptLogger, name, staticmethod(_drop))
        # every LLM request and response as JSON, at INFO, straight to loguru
        from aworld.models import llm, openai_provider

        for module in (util, llm, openai_provider):
            if hasattr(module, "log_llm_record"):
                module.log_llm_record = _drop
    if "DEBUG" in below:
        _patch_run_succeed()


def _patch_run_succeed() -> None:
    """AWorld's `run_succeed` without its DEBUG record, whose f-string rendered the whole node
    (results included) on every message, whether or not the record was kept."""
    import time

    from aworld.runners.state_manager import RunNodeStatus, RuntimeStateManager

    def run_succeed(self, node_id, result_msg=None, results=None) -> None:
        node = self._node_exist(node_id)
        node.status = RunNodeStatus.SUCCESS
        node.result_msg = result_msg
        node.end_time = time.time()
        if results:
            if not node.results:
                node.results = []
            node.results.extend(results)
        self.storage.update(node)

    RuntimeStateManager.run_succeed = run_succeed


_ssl_context = None


def shared_ssl_context():
    """httpx's default client SSL context, built once per process instead of once per MCP session."""
    global _ssl_context
    if _ssl_context is None:
        import httpx

        _ssl_context = httpx.create_ssl_context()
    return _ssl_context


def mcp_http_client(headers=None, timeout=None, auth=None):
    """mcp's `create_mcp_http_client`, less the SSL context built for each client."""
    import httpx
    from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

    if timeout is None:
        timeout = httpx.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
    kwargs: dict[str, Any] = {"timeout": timeout, "verify": shared_ssl_context()}
    if headers is not None:
        kwargs["headers"] = headers
    if auth is not None:
        kwargs["auth"] = auth
    return httpx.AsyncClient(**kwargs)


def _streams_with_shared_ssl(self):
    from datetime import timedelta

    from mcp.client.streamable_http import streamablehttp_client

    return streamablehttp_client(
        url=self.params["url"],
        headers=self.params.get("headers", None),
        timeout=self.params.get("timeout", timedelta(seconds=30)),
        sse_read_timeout=self.params.get("sse_read_timeout", timedelta(seconds=60 * 5)),
        terminate_on_close=self.params.get("terminate_on_close", True),
        httpx_client_factory=mcp_http_client,
    )


async def _cleanup_without_sleep(self) -> None:
    """AWorld's MCP session close (close the session, then the transport, which sends DELETE),
    without the 100 ms sleep it took first."""
    async with self._cleanup_lock:
        exit_stack = self.exit_stack
        self.session = None
        try:
            if exit_stack:
                await exit_stack.aclose()
        except Exception:  # AWorld logs these at DEBUG and goes on; so does this
            pass
        finally:
            self.session = None


def apply() -> None:
    from aworld.mcp_client import server

    quiet_aworld_logs(aworld_log_level())
    server.MCPServerStreamableHttp.create_streams = _streams_with_shared_ssl
    server._MCPServerWithClientSession.cleanup = _cleanup_without_sleep
    _patch_usage_process()


def _usage_process_without_source(usage=None, context=None):
    """AWorld's `usage_process` (token usage added to the context, also under the name of the
    model object whose `call_llm_model` made the call), finding that object by walking the
    frames instead of `inspect.stack()`, which read the source lines of every frame per call."""
    import os
    import sys

    from aworld.core.context.base import Context
    from aworld.logs.util import logger
    from aworld.models.usage import normalize_usage

    if not context:
        context = Context()
    usage = normalize_usage(usage)
    frame = sys._getframe(0)
    while frame is not None:
        code = frame.f_code
        if "call_llm_model" in code.co_name and os.path.basename(code.co_filename) == "llm.py":
            break
        frame = frame.f_back
    caller = frame.f_back if frame is not None else None
    if caller is None:
        logger.warning("not category usage find to count")
    else:
        import copy

        name = getattr(caller.f_locals.get("self"), "_name", "unknown")
        usage[name] = copy.copy(usage)
    context.add_token(usage)


def _patch_usage_process() -> None:
    from aworld.agents import llm_agent
    from aworld.models import utils

    for module in (utils, llm_agent):
        if getattr(module, "usage_process", None) is not None:
            module.usage_process = _usage_process_without_source
