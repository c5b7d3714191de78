"""Releasing an ended episode's state on its tool servers (`protocol.EPISODE_RELEASE_PATH`).

Best effort by design: a server without the route, one that is down or slow, or a config
that cannot be resolved costs at most `timeout_s` and never changes the episode's result.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
from typing import Any

import httpx

from aworld_train.core.protocol import MissingVariable, release_url, resolve_env_refs

log = logging.getLogger("aworld_train.rollout")
STREAMABLE_HTTP = {"streamable-http", "streamable_http", "streamablehttp"}


@functools.cache
def _tls() -> ssl.SSLContext:
    # Made once: a new client would otherwise load the CA bundle each time (~30 ms of CPU).
    return httpx.create_ssl_context()


def release_targets(mcp_config: dict[str, Any], episode_id: str) -> list[tuple[str, dict[str, str]]]:
    """(release URL, headers) for each streamable-HTTP server of an agent's `mcp_config`;
    the Authorization header, the only one sent, comes from the server's resolved headers."""
    targets = []
    for name, conf in ((mcp_config or {}).get("mcpServers") or {}).items():
        if not isinstance(conf, dict) or str(conf.get("type", "")).lower() not in STREAMABLE_HTTP:
            continue
        try:
            conf = resolve_env_refs(conf)
        except MissingVariable as exc:
            log.debug("not releasing episode %s on %s: %s", episode_id, name, exc)
            continue
        if not conf.get("url"):
            continue
        headers = {k: v for k, v in (conf.get("headers") or {}).items() if k.lower() == "authorization"}
        targets.append((release_url(conf["url"], episode_id), headers))
    return targets


async def release_on_servers(mcp_config: dict[str, Any], episode_id: str, timeout_s: float = 3.0) -> int:
    """DELETE the episode on each server that may hold its state; how many acknowledged it."""
    targets = release_targets(mcp_config, episode_id)
    if not targets:
        return 0

    async def one(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> bool:
        try:
            response = await client.delete(url, headers=headers)
        except httpx.HTTPError as exc:
            log.debug("releasing episode %s at %s failed: %r", episode_id, url, exc)
            return False
        if response.status_code not in (200, 202, 204, 404, 405):
            log.debug("releasing episode %s at %s: HTTP %s", episode_id, url, response.status_code)
        return response.is_success

    try:
        async with httpx.AsyncClient(timeout=timeout_s, verify=_tls()) as client:
            done = await asyncio.wait_for(
                asyncio.gather(*(one(client, url, headers) for url, headers in targets)), timeout_s + 1
            )
    except (asyncio.TimeoutError, httpx.HTTPError, OSError) as exc:
        log.debug("releasing episode %s: %r", episode_id, exc)
        return 0
    return sum(done)
