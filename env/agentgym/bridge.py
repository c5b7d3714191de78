"""An MCP server that gives an agent one AgentGym environment server as tools.

Per episode (the `X-Episode-Id` header; ARCHITECTURE.md invariant 3) it creates an
environment on the AgentGym server and resets it to the task's item, read from the
`X-Task-Id` header (the row's id): its trailing number, as AgentGym names items
(`textcraft_12` -> item 12). Tools:

- `act(action)`: one action; the observation back. Once the environment gives a reward or
  ends the task, the result ends with a `[environment] reward=R done=true|false` line, which
  `aworld_train.rewards.agentgym:env_reward` turns into the episode's reward.
- `instruction()`: the task, as the environment stated it at reset.
- `available_actions()`: only for environments that list them (BabyAI, ALFWorld).

`DELETE /episodes/{id}` (protocol.EPISODE_RELEASE_PATH) closes the episode's environment.
A server that stays unreachable after retries makes the tool call fail with
`protocol.SERVER_DOWN_MARK`, which ends the episode as `tool_server_down`.

Run: `aworld-train env up agentgym --env textcraft --server http://127.0.0.1:36001`
(or AGENTGYM_ENV / AGENTGYM_SERVER in its environment, as a config's `env:` entry sets them).
"""
# No `from __future__ import annotations` here: FastMCP must see the real Context type.

import asyncio
import logging
import os
import re
import sys
from collections import OrderedDict
from typing import Any

import httpx
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from starlette.requests import Request
from starlette.responses import JSONResponse

from aworld_train.core.protocol import EPISODE_HEADER, EPISODE_RELEASE_PATH, SERVER_DOWN_MARK, TASK_HEADER
from aworld_train.env.agentgym.client import AgentGymClient, EnvError, ServerDown, StepResult
from aworld_train.env.agentgym.profiles import profile
from aworld_train.env.agentgym.status import status_line
from aworld_train.env.mcp_fixes import contain_session_errors, episode_keyed_settings

ENV_VARIABLE = "AGENTGYM_ENV"
SERVER_VARIABLE = "AGENTGYM_SERVER"
log = logging.getLogger("aworld_train.env.agentgym")
_ITEM = re.compile(r"(\d+)$")


def item_index(task_id: str) -> int:
    """`textcraft_12` -> 12: AgentGym's item ids end in the item index."""
    match = _ITEM.search(task_id.strip())
    if not match:
        raise ToolError(
            f"task id {task_id!r} does not end in an item index; AgentGym rows are named like "
            "'textcraft_12' (the bridge resets the environment to item 12)"
        )
    return int(match.group(1))


class EpisodeEnv:
    def __init__(self, item: int) -> None:
        self.item = item
        self.env_id: Any = None
        self.id_field = "id"
        self.instruction = ""
        self.actions: list[str] | None = None
        self.reward = 0.0
        self.done = False
        self.steps = 0
        self.lock = asyncio.Lock()


class Bridge:
    def __init__(self, env_name: str, server_url: str, capacity: int = 4096, **client_kwargs) -> None:
        self.profile = profile(env_name)
        self.client = AgentGymClient(server_url, self.profile, **client_kwargs)
        self.episodes: OrderedDict[str, EpisodeEnv] = OrderedDict()
        self.capacity = capacity
        self._closing: set[asyncio.Task] = set()  # closes under way, kept referenced until done

    def _down(self, exc: ServerDown) -> ToolError:
        return ToolError(f"{SERVER_DOWN_MARK} {exc}")

    async def episode(self, episode_id: str, task_id: str) -> EpisodeEnv:
        if not episode_id:
            raise ToolError(f"no {EPISODE_HEADER} header: every call must name its episode")
        env = self.episodes.get(episode_id)
        if env is None:
            if not task_id:
                raise ToolError(f"no {TASK_HEADER} header: the bridge needs the task's item id")
            env = self.episodes[episode_id] = EpisodeEnv(item_index(task_id))
            self._evict()
        async with env.lock:
            if env.env_id is None:
                try:
                    env.env_id, env.id_field = await self.client.create()
                    first = await self.client.reset(env.env_id, env.id_field, env.item)
                except ServerDown as exc:
                    self.episodes.pop(episode_id, None)
                    raise self._down(exc) from None
                except EnvError as exc:
                    self.episodes.pop(episode_id, None)
                    if env.env_id is not None:  # created, but the item was refused: close it
                        await self._close(env)
                        env.env_id = None
                    raise ToolError(f"the environment could not start item {env.item}: {exc}") from None
                env.instruction, env.actions = first.observation, first.actions
        return env

    def _evict(self) -> None:
        while len(self.episodes) > self.capacity:
            _, old = self.episodes.popitem(last=False)
            if old.env_id is not None:
                task = asyncio.get_running_loop().create_task(self._close(old))
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)

    async def _close(self, env: EpisodeEnv) -> bool:
        try:
            return await self.client.close(env.env_id, env.id_field)
        except (ServerDown, EnvError) as exc:
            log.debug("closing environment %s: %s", env.env_id, exc)
            return False

    async def act(self, episode_id: str, task_id: str, action: str) -> str:
        env = await self.episode(episode_id, task_id)
        async with env.lock:
            if env.done:
                return "The task is already finished.\n" + status_line(env.reward, env.done)
            try:
                result: StepResult = await self.client.step(env.env_id, env.id_field, action)
            except ServerDown as exc:
                raise self._down(exc) from None
            except EnvError as exc:
                raise ToolError(str(exc)) from None
            env.steps += 1
            env.reward, env.done = result.reward, result.done
            if result.actions is not None:
                env.actions = result.actions
        text = result.observation
        if result.done or result.reward:
            text += "\n" + status_line(result.reward, result.done)
        return text

    async def release(self, episode_id: str) -> bool:
        """Forget the episode and close its environment in the background: the rollout's release
        request is answered at once (it waits only a few seconds), the AgentGym server's /close
        follows once the episode's last call has finished."""
        env = self.episodes.pop(episode_id, None)
        if env is None or env.env_id is None:
            return False

        async def close() -> None:
            async with env.lock:
                await self._close(env)

        task = asyncio.get_running_loop().create_task(close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        return True


def _headers(ctx: Context) -> tuple[str, str]:
    try:
        request = ctx.request_context.request
        headers = request.headers if request is not None else {}
    except (AttributeError, ValueError, LookupError):
        headers = {}
    return headers.get(EPISODE_HEADER, ""), headers.get(TASK_HEADER, "")


def build_server(
    env_name: str, server_url: str, host: str = "127.0.0.1", port: int = 0, **bridge_kwargs
) -> FastMCP:
    contain_session_errors()
    bridge = Bridge(env_name, server_url, **bridge_kwargs)
    server = FastMCP(f"agentgym-{bridge.profile.name}", host=host, port=port, **episode_keyed_settings())
    server.bridge = bridge  # type: ignore[attr-defined] - tests read its episodes

    @server.tool()
    async def act(action: str, ctx: Context) -> str:
        """Take one action in the environment (for example 'get 1 oak logs'); returns what you observe."""
        return await bridge.act(*_headers(ctx), action)

    @server.tool()
    async def instruction(ctx: Context) -> str:
        """The task you are asked to solve, as the environment states it."""
        return (await bridge.episode(*_headers(ctx))).instruction

    if bridge.profile.actions:

        @server.tool()
        async def available_actions(ctx: Context) -> str:
            """The actions the environment accepts now, one per line."""
            env = await bridge.episode(*_headers(ctx))
            return "\n".join(env.actions or [])

    @server.custom_route(EPISODE_RELEASE_PATH.replace("}", ":path}"), methods=["DELETE"])
    async def release(request: Request) -> JSONResponse:
        closed = await bridge.release(request.path_params["episode_id"])
        return JSONResponse({"closed_environments": int(closed)})

    @server.custom_route("/health", methods=["GET"])
    async def health(_: Request) -> JSONResponse:
        return JSONResponse(
            {
                "status": "ok",
                "env": bridge.profile.name,
                "server": bridge.client.base_url,
                "episodes": len(bridge.episodes),
            }
        )

    return server


def server_url(url: str) -> str:
    """The AgentGym server's base URL. A URL ending in `/mcp` is one a config's `env:` entry
    exported for a server it started (`${AGENTGYM_TEXTCRAFT_MCP_URL}`): its base is meant."""
    url = url.strip().rstrip("/")
    return url.removesuffix("/mcp")


def serve(
    transport: str = "http",
    host: str = "127.0.0.1",
    port: int = 8770,
    env: str | None = None,
    server: str | None = None,
) -> None:
    env = env or os.environ.get(ENV_VARIABLE, "")
    server = server or os.environ.get(SERVER_VARIABLE, "")
    if not env or not server:
        raise SystemExit(
            "the agentgym bridge needs the environment's name and its AgentGym server: "
            "--env textcraft --server http://127.0.0.1:36001 (in a config: "
            f"env: [{{name: agentgym, env: {{{ENV_VARIABLE}: textcraft, {SERVER_VARIABLE}: http://...}}}}])"
        )
    url = server_url(server)
    try:  # said at start, not only as failed episodes later; the server may still come up
        httpx.get(url + "/", timeout=5.0)
    except httpx.HTTPError as exc:
        print(f"warning: the AgentGym {env} server at {url} does not answer yet: {exc!r}", file=sys.stderr)
    mcp = build_server(env, url, host, port)
    mcp.run(transport="streamable-http" if transport == "http" else "stdio")
