"""Builds what a run needs at run time: env servers, the local policy, the rollout runtime."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from aworld_train.chat import ChatRenderer
from aworld_train.config import EnvServerConfig, TrainConfig
from aworld_train.episode import RolloutRuntime


def url_variable(name: str) -> str:
    return f"{name.upper().replace('-', '_')}_MCP_URL"


@contextlib.contextmanager
def running_envs(
    servers: list[EnvServerConfig], log_dir: str | Path | None = None
) -> Iterator[dict[str, str]]:
    """Start the configured MCP servers, export `<NAME>_MCP_URL` for agent specs, stop them after."""
    from aworld_train.env.launcher import start_server

    started = []
    previous: dict[str, str | None] = {}
    urls: dict[str, str] = {}
    try:
        for server in servers:
            log = Path(log_dir) / f"env-{server.name}.log" if log_dir else None
            if log:
                log.parent.mkdir(parents=True, exist_ok=True)
            running = start_server(
                server.name, port=server.port, log_path=log, environment=server.environment
            )
            started.append(running)
            var = url_variable(server.name)
            previous[var] = os.environ.get(var)
            os.environ[var] = urls[server.name] = running.url
        yield urls
    finally:
        for running in started:
            running.stop()
        for var, value in previous.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


def local_runtime(config: TrainConfig, model=None, tokenizer=None) -> tuple[RolloutRuntime, object]:
    """The rollout runtime over a local transformers policy; returns (runtime, policy)."""
    from aworld_train.local_policy import LocalPolicy
    from aworld_train.models import load_model, load_tokenizer, stop_token_ids

    tokenizer = tokenizer or load_tokenizer(config.model)
    model = model or load_model(config.model)
    stops = stop_token_ids(tokenizer)
    policy = LocalPolicy(model, tokenizer, stops, max_batch_size=config.rollout.max_batch_size)
    return RolloutRuntime(
        policy, ChatRenderer(tokenizer, tool_block=config.rollout.tool_block), stops, config.rollout
    ), policy
