"""The ToolBench MCP server: each task's APIs as tools, plus `Finish`, run through StableToolBench.

Every request names its episode and task in the headers the adapter injects:
`X-Episode-Id` (state is keyed by it: ARCHITECTURE.md invariant 3) and `X-Task-Id`
(the row id the converter wrote, `<group>-<query_id>`). The tasks come from the files
in AWORLD_TRAIN_TOOLBENCH_TASKS (converted rows, .jsonl/.json/.parquet, or
StableToolBench query files; several joined with the path separator), read at start.

A call of an API is sent to StableToolBench's server (TOOLBENCH_SERVER_URL, default
http://127.0.0.1:8080/virtual) with the key from TOOLBENCH_KEY, which the server's
environment resolves (a config keeps `${TOOLBENCH_KEY}`). An answer with a non-empty
`error` fails the call with that text; a server that does not answer fails it with
`protocol.SERVER_DOWN_MARK`, which ends the episode as `tool_server_down`.
`Finish` records the episode's end; later calls are refused.

Run: `aworld-train env up toolbench [--port N]`.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from mcp.server.fastmcp import FastMCP
from mcp.types import ContentBlock, TextContent
from mcp.types import Tool as MCPTool

from aworld_train.core.protocol import EPISODE_HEADER, EPISODE_RELEASE_PATH, SERVER_DOWN_MARK, TASK_HEADER
from aworld_train.env.toolbench import catalog, virtual

TASKS_VARIABLE = "AWORLD_TRAIN_TOOLBENCH_TASKS"
URL_VARIABLE = "TOOLBENCH_SERVER_URL"
KEY_VARIABLE = "TOOLBENCH_KEY"
DEFAULT_URL = "http://127.0.0.1:8080/virtual"


class ToolCallError(Exception):
    """The text the agent sees for a call that failed."""


def _rows(path: Path) -> list[dict[str, Any]]:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    text = path.read_text(encoding="utf-8")
    if suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    data = json.loads(text)
    return data if isinstance(data, list) else []


def load_tasks(paths: str) -> dict[str, catalog.ToolBenchTask]:
    """Task id -> task, from converted rows or raw query files (ids `<file stem>-<query_id>`)."""
    tasks: dict[str, catalog.ToolBenchTask] = {}
    for part in filter(None, (p.strip() for p in paths.split(os.pathsep))):
        path = Path(part)
        if not path.is_file():
            raise SystemExit(f"{TASKS_VARIABLE}: {part!r} does not exist")
        for index, row in enumerate(_rows(path)):
            try:
                if isinstance(row, dict) and "extra_info" in row:
                    task_id, task = str(row["id"]), catalog.task_from_row(row)
                else:
                    task = catalog.parse_record(row, index)
                    task_id = f"{path.stem}-{task.query_id}"
            except (catalog.BadRecord, KeyError, TypeError, json.JSONDecodeError) as exc:
                raise SystemExit(f"{TASKS_VARIABLE}: {part} row {index}: {exc}") from None
            if task_id in tasks and tasks[task_id] != task:
                raise SystemExit(f"{TASKS_VARIABLE}: task {task_id!r} appears twice with different APIs")
            tasks[task_id] = task
    return tasks


@dataclass
class EpisodeState:
    task_id: str
    finished: str | None = None  # the Finish return_type once called
    calls: int = 0


class Episodes:
    """Episode id -> state, bounded so a long-running server does not grow without end."""

    def __init__(self, capacity: int = 8192) -> None:
        self._data: OrderedDict[str, EpisodeState] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def get(self, episode: str, task_id: str) -> EpisodeState:
        with self._lock:
            state = self._data.get(episode)
            if state is not None and state.task_id != task_id:
                raise ToolCallError(
                    f"episode {episode!r} was started on task {state.task_id!r}, not {task_id!r}"
                )
            if state is None:
                state = self._data[episode] = EpisodeState(task_id)
            self._data.move_to_end(episode)
            while len(self._data) > self._capacity:
                self._data.popitem(last=False)
            return state

    def drop(self, episode: str) -> bool:
        with self._lock:
            return self._data.pop(episode, None) is not None

    def __len__(self) -> int:
        return len(self._data)


class ToolBenchServer(FastMCP):
    def __init__(
        self,
        tasks: dict[str, catalog.ToolBenchTask],
        url: str = DEFAULT_URL,
        key: str = "",
        host: str = "127.0.0.1",
        port: int = 0,
        timeout_s: float = 60.0,
    ) -> None:
        super().__init__("toolbench", host=host, port=port)
        self.tasks = tasks
        self.url = url
        self.key = key
        self.episodes = Episodes()
        self._client = httpx.AsyncClient(timeout=timeout_s)

        @self.custom_route(EPISODE_RELEASE_PATH, methods=["DELETE"])
        async def release(request):  # the rollout drops an ended episode's state
            from starlette.responses import JSONResponse

            return JSONResponse({"released": self.episodes.drop(request.path_params["episode_id"])})

    def _episode(self) -> tuple[catalog.ToolBenchTask, EpisodeState]:
        try:
            request = self.get_context().request_context.request
        except (AttributeError, ValueError, LookupError):
            request = None
        headers = request.headers if request is not None else {}
        episode, task_id = headers.get(EPISODE_HEADER, ""), headers.get(TASK_HEADER, "")
        if not episode or not task_id:
            raise ToolCallError(
                f"the ToolBench server needs the {EPISODE_HEADER} and {TASK_HEADER} headers (the row id, "
                "e.g. G1_instruction-588); aworld-train episodes send them"
            )
        task = self.tasks.get(task_id)
        if task is None:
            raise ToolCallError(
                f"unknown ToolBench task {task_id!r}: start the server with {TASKS_VARIABLE} naming the "
                f"converted file that holds it ({len(self.tasks)} tasks loaded)"
            )
        return task, self.episodes.get(episode, task_id)

    def _has_task(self) -> bool:
        try:
            request = self.get_context().request_context.request
        except (AttributeError, ValueError, LookupError):
            return False
        return request is not None and bool(request.headers.get(TASK_HEADER))

    async def list_tools(self) -> list[MCPTool]:
        tools = []
        if self._has_task():  # without a task (a reachability probe) only Finish is listed
            task, _ = self._episode()
            tools = [
                MCPTool(
                    name=name, description=catalog.description(api), inputSchema=catalog.input_schema(api)
                )
                for name, api in task.functions().items()
            ]
        tools.append(
            MCPTool(
                name=catalog.FINISH, description=catalog.FINISH_DESCRIPTION, inputSchema=catalog.FINISH_SCHEMA
            )
        )
        return tools

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Sequence[ContentBlock]:
        try:
            return await self._call_tool(name, arguments)
        except ToolCallError as exc:  # worded as FastMCP words a failed tool, which clients look for
            raise ToolCallError(f"Error executing tool {name}: {exc}") from None

    async def _call_tool(self, name: str, arguments: dict[str, Any]) -> Sequence[ContentBlock]:
        task, state = self._episode()
        arguments = dict(arguments or {})
        if state.finished is not None:
            raise ToolCallError(f"the task is over: Finish was called ({state.finished})")
        state.calls += 1
        if name == catalog.FINISH:
            return [TextContent(type="text", text=self._finish(state, arguments))]
        api = task.functions().get(name)
        if api is None:
            raise ToolCallError(f"no such function: {name!r}; this task offers {', '.join(task.functions())}")
        return [TextContent(type="text", text=await self._call(api, arguments))]

    def _finish(self, state: EpisodeState, arguments: dict[str, Any]) -> str:
        kind = arguments.get("return_type")
        if kind not in (catalog.GIVE_ANSWER, catalog.GIVE_UP):
            raise ToolCallError(f"Finish needs return_type {catalog.GIVE_ANSWER!r} or {catalog.GIVE_UP!r}")
        if kind == catalog.GIVE_ANSWER and not str(arguments.get("final_answer") or "").strip():
            raise ToolCallError("Finish with give_answer needs a final_answer")
        state.finished = kind
        return json.dumps({"error": "", "response": "successfully giving the final answer."})

    async def _call(self, api: catalog.Api, arguments: dict[str, Any]) -> str:
        body = virtual.request_body(api, arguments, self.key)
        try:
            response = await self._client.post(self.url, json=body)
        except httpx.HTTPError as exc:
            raise ToolCallError(
                f"{SERVER_DOWN_MARK} StableToolBench's server at {self.url} did not answer "
                f"({type(exc).__name__}); start it or set {URL_VARIABLE}"
            ) from None
        if response.status_code >= 500:
            raise ToolCallError(
                f"{SERVER_DOWN_MARK} StableToolBench's server at {self.url} answered HTTP {response.status_code}"
            )
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if response.status_code != 200 or not isinstance(answer, dict):
            raise ToolCallError(
                f"StableToolBench's server answered HTTP {response.status_code}: {response.text:.300}"
            )
        if answer.get("error"):
            raise ToolCallError(f"{api.api} failed: {answer['error']}")
        return json.dumps({"error": "", "response": answer.get("response", "")})


def build_server(host: str = "127.0.0.1", port: int = 0) -> ToolBenchServer:
    tasks = load_tasks(os.environ.get(TASKS_VARIABLE, ""))
    if not tasks:
        raise SystemExit(
            f"{TASKS_VARIABLE} must name the converted ToolBench files (aworld-train data toolbench)"
        )
    url = os.environ.get(URL_VARIABLE) or DEFAULT_URL
    return ToolBenchServer(tasks, url, os.environ.get(KEY_VARIABLE, ""), host, port)


def serve(transport: str = "http", host: str = "127.0.0.1", port: int = 8767) -> None:
    server = build_server(host, port)
    server.run(transport="streamable-http" if transport == "http" else "stdio")
