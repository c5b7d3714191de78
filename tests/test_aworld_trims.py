"""The per-episode work taken off AWorld's rollout path (aworld/trims.py) and the servers' quiet logs."""

from __future__ import annotations

import logging

import anyio
import pytest

from aworld_train.aworld import install, trims
from aworld_train.core.errors import ConfigError
from aworld_train.env.mcp_fixes import _ClosedStandaloneStream
from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.policies.client import ScriptedPolicy


def test_aworld_records_below_warning_and_prompt_logs_are_dropped():
    install()
    from aworld.logs.prompt_log import PromptLogger
    from aworld.logs.util import logger, prompt_logger

    assert logger.debug is trims._drop and logger.info is trims._drop and prompt_logger.info is trims._drop
    assert logger.warning is not trims._drop and logger.error is not trims._drop
    assert PromptLogger.log_agent_call_llm_messages is trims._drop


def test_a_wrong_aworld_log_level_names_the_variable(monkeypatch):
    monkeypatch.setenv(trims.LOG_LEVEL_VARIABLE, "LOUD")
    with pytest.raises(ConfigError, match="AWORLD_TRAIN_AWORLD_LOG_LEVEL='LOUD'.*WARNING"):
        trims.aworld_log_level()
    monkeypatch.setenv(trims.LOG_LEVEL_VARIABLE, "info")
    assert trims.aworld_log_level() == "INFO"


async def test_mcp_clients_share_one_ssl_context():
    first, second = trims.mcp_http_client(), trims.mcp_http_client(headers={"X-A": "1"})
    async with first, second:
        contexts = {id(c._transport._pool._ssl_context) for c in (first, second)}
        assert contexts == {id(trims.shared_ssl_context())}
        assert second.headers["X-A"] == "1" and not first.follow_redirects


def test_only_the_closed_get_stream_error_is_dropped():
    keep = _ClosedStandaloneStream()

    def record(message: str, exc: BaseException | None) -> logging.LogRecord:
        info = (type(exc), exc, None) if exc else None
        return logging.LogRecord("mcp.server.streamable_http", logging.ERROR, "x", 1, message, (), info)

    assert not keep.filter(record("Error in standalone SSE writer", anyio.ClosedResourceError()))
    assert keep.filter(record("Error in standalone SSE writer", ValueError("real")))
    assert keep.filter(record("Error handling POST request", anyio.ClosedResourceError()))


async def test_the_calculator_server_logs_nothing_for_a_clean_episode(
    tmp_path, tokenizer, im_end, calculator_spec, make_runtime
):
    from aworld_train.env.launcher import start_server

    log = tmp_path / "calculator.log"
    with start_server("calculator", log_path=log) as server:
        servers = {
            "calculator": {**calculator_spec.mcp_config["mcpServers"]["calculator"], "url": server.url}
        }
        spec = calculator_spec.model_copy(update={"mcp_config": {"mcpServers": servers}, "few_shot": []})
        call = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "6 * 7"}}\n</tool_call>'
        policy = ScriptedPolicy(tokenizer, [call, "The answer is 42."], im_end)
        traj = await Episode(spec, Task("t", ["What is 6 * 7?"]), make_runtime(policy)).run()
    assert traj.status == "ok" and traj.tool_calls[0].result == "42"
    text = log.read_text()
    # no access lines, no per-request INFO, no traceback for the session the client closed
    assert "Error in standalone SSE writer" not in text and "Traceback" not in text
    assert "POST /mcp" not in text and "Processing request" not in text
