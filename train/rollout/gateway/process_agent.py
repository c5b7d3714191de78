"""An agent that runs in a process of its own and reaches the policy through the gateway.

`ProcessAgent` is an `AgentDriver` (`rollout/episodes/driver.py`): its `command` starts one long-lived agent
process per trainer process (per rollout worker, per verl agent-loop worker), which serves every
episode there. The trainer speaks to it in JSON lines:

  to its stdin, once at start:  {"type": "hello", "protocol": 1}
  per user turn:                {"type": "turn", "episode_id", "user_turn", "text", "base_url",
                                 "api_key", "model", "max_assistant_turns",
                                 "task": {"id", "system", "extra_info"}}
  and when an episode ends:     {"type": "end", "episode_id"}
  from its stdout, once ready:  {"type": "ready", "protocol": 1}
  per turn:                     {"episode_id", "user_turn", "answer": "..."}  or  {..., "error": "..."}

A turn's non-empty `answer` is the episode's answer for that turn, which the reward reads (what
the agent's framework returned: a final-answer tool's argument, a structured response); without
one, the last reply that called no tool is.

No turn is sent before the process answers the hello line within `start_timeout_s`; the trainer
holds this handshake once before any model loads (`check_starts`), so a command that does not
start, exits, or does not speak the protocol is refused with its exit code and last log lines.

`max_assistant_turns` is the run's budget of LLM calls for the turn (rollout.max_assistant_turns):
the call past it is answered 410 and the episode ends max_turns, so an agent that wants to answer
within it can plan by it. `base_url` and `api_key` are the episode's gateway session: the agent points any OpenAI client at
them (AWorld's stock `openai` provider, the `openai` SDK, another language's client). Other stdout
lines and all of stderr go to the agent's log. A process that exits fails the turns it owed with
its exit code and its last log lines, and the next episode starts a new one.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import json
import os
import shlex
import tempfile
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from aworld_train.core.protocol import resolve_env_refs
from aworld_train.core.validation import SpecFile
from aworld_train.rollout.episodes.driver import AgentRole, LLMEndpoint
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.gateway.server import Gateway, Session, gateway

_LOG_TAIL = 20
PROTOCOL = 1  # the JSON-lines protocol's version, in the hello and ready lines


class ProcessAgent(SpecFile):
    """An agent run by `command`, in its own process, trained through the gateway."""

    name: str = Field("agent", description="the agent's name in samples and metrics")
    command: list[str] = Field(description="the agent process's command line (a list, or one string)")
    cwd: str | None = Field(None, description="its working folder (default: the trainer's)")
    env: dict[str, str] = Field(
        default_factory=dict, description="variables added to its environment; keep secrets ${VAR} references"
    )
    mcp_config: dict[str, Any] = Field(
        default_factory=dict,
        description="the MCP servers the agent uses ({mcpServers: {name: {url}}}): checked before the run, "
        "watched during episodes, released after each",
    )
    mcp_servers: list[str] = Field(default_factory=list, description="which of mcp_config's servers it uses")
    few_shot: list[dict[str, Any]] = Field(
        default_factory=list, description="example chat turns placed after the system message of every prompt"
    )
    gateway_host: str = Field(
        "127.0.0.1",
        description="where the gateway listens: loopback unless set; 0.0.0.0 (every interface) exposes "
        "the sessions to the network, each still behind its bearer token",
    )
    gateway_url_host: str | None = Field(
        None,
        description="the host the sessions' base_url names (default: gateway_host; for 0.0.0.0 this "
        "machine's address): the name a container or another node dials",
    )
    start_timeout_s: float = Field(
        60.0, gt=0, description="how long the process may take to answer the trainer's hello line"
    )
    log_dir: str | None = Field(
        None, description="where the agent process's log goes (default: a temp folder)"
    )

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return shlex.split(value) if isinstance(value, str) else value

    @field_validator("command")
    @classmethod
    def _not_empty(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("give the agent process's command line, e.g. [python, my_agent.py]")
        return value

    @property
    def system_prompt(self) -> str:
        return ""  # the agent process sends its own

    def roles(self) -> list[AgentRole]:
        return [AgentRole(self.name, list(self.few_shot), list(self.mcp_servers))]

    def start(
        self, endpoint: LLMEndpoint, episode_id: str, task: Task, max_assistant_turns: int
    ) -> ProcessRun:
        return ProcessRun(self, endpoint, episode_id, task, max_assistant_turns)

    def stop_processes(self) -> None:
        """Stop this agent's processes and forget them: a run's end (nothing a run starts outlives
        it); a later episode starts a new one."""
        spec = self.model_dump_json()
        for key in [key for key in _PROCESSES if key[1] == spec]:
            process = _PROCESSES.pop(key)
            if process.gateway is not None:
                process.gateway.submit(process.stop()).result()


class AgentProcess:
    """One running agent process and the turns it owes; lives on the gateway's event loop."""

    def __init__(self, spec: ProcessAgent, environ: dict[str, str] | None = None) -> None:
        self.spec = spec
        self.environ = environ  # the environment its process starts in (default: this process's)
        self.proc: asyncio.subprocess.Process | None = None
        self.waiting: dict[tuple[str, int], asyncio.Future] = {}
        self.tail: collections.deque[str] = collections.deque(maxlen=_LOG_TAIL)
        self.log_path: Path | None = None
        self.starts = 0
        self.gateway: Gateway | None = None  # whose event loop it lives on
        self._starting: asyncio.Lock | None = None  # made on the gateway's loop
        self._ready: asyncio.Future | None = None  # the ready line of the process last started

    async def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one turn; its answer line."""
        await self._ensure_running()
        key = (message["episode_id"], message["user_turn"])
        future = self.waiting[key] = asyncio.get_running_loop().create_future()
        try:
            await self._send(message)
            return await future
        finally:
            self.waiting.pop(key, None)

    async def tell(self, message: dict[str, Any]) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self._send(message)

    async def _send(self, message: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        await self.proc.stdin.drain()

    async def _ensure_running(self) -> None:
        self._starting = self._starting or asyncio.Lock()
        async with self._starting:  # the episodes of a batch all ask at once: one process for them
            if self.proc is None or self.proc.returncode is not None:
                await self._start()

    async def _start(self) -> None:
        spec = self.spec
        folder = Path(spec.log_dir or tempfile.gettempdir())
        folder.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        self.log_path = folder / f"aworld-train-agent-{spec.name}-{os.getpid()}-{self.starts}.log"
        base = dict(os.environ if self.environ is None else self.environ)
        env = {**base, **{k: resolve_env_refs(v, base) for k, v in spec.env.items()}}
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *spec.command,
                cwd=spec.cwd,
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=2**24,  # an answer line may be long
            )
        except OSError as exc:
            raise RuntimeError(
                f"agent {spec.name!r}: cannot start {shlex.join(spec.command)} ({exc})"
            ) from None
        log = self.log_path.open("a", encoding="utf-8")
        proc = self.proc
        self._ready = asyncio.get_running_loop().create_future()
        asyncio.ensure_future(self._read_answers(proc, log))
        asyncio.ensure_future(self._read_log(proc.stderr, log))
        await self._handshake(proc)

    async def _handshake(self, proc: asyncio.subprocess.Process) -> None:
        """Send the hello line and wait for the ready line; RuntimeError with the reason otherwise."""
        with contextlib.suppress(ConnectionError):  # it exited already: _read_answers says how
            await self._send({"type": "hello", "protocol": PROTOCOL})
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), self.spec.start_timeout_s)
        except asyncio.TimeoutError:
            proc.kill()
            raise RuntimeError(
                f"agent {self.spec.name!r}: its process ({shlex.join(self.spec.command)}) did not answer the "
                f'trainer\'s hello line with {{"type": "ready", "protocol": {PROTOCOL}}} within '
                f"{self.spec.start_timeout_s:g}s (log {self.log_path}); its last lines: {self._tail()}. The "
                "agent must speak the JSON-lines protocol (examples/calculator_gateway/turns.py does), or "
                "raise start_timeout_s if it starts slowly"
            ) from None

    def _tail(self) -> str:
        return " | ".join(self.tail) or "(none)"

    def _log(self, log, line: str) -> None:
        self.tail.append(line)
        log.write(line + "\n")
        log.flush()

    async def _read_log(self, stream: asyncio.StreamReader, log) -> None:
        async for raw in stream:
            self._log(log, raw.decode(errors="replace").rstrip("\n"))

    async def _read_answers(self, proc: asyncio.subprocess.Process, log) -> None:
        ready = self._ready
        async for raw in proc.stdout:
            line = raw.decode(errors="replace").strip()
            message = _message(line)
            if message is None:
                self._log(log, line)  # the agent's own prints
            elif message.get("type") == "ready":
                if ready is not None and not ready.done():
                    ready.set_result(message)
            else:
                future = self.waiting.get((str(message.get("episode_id")), message.get("user_turn", 0)))
                if future is not None and not future.done():
                    future.set_result(message)
        code = await proc.wait()
        await asyncio.sleep(0.05)  # let the last stderr lines arrive
        log.close()
        started = ready is not None and ready.done() and not ready.exception()
        why = (
            f"agent process {shlex.join(self.spec.command)} exited with code {code}"
            + ("" if started else " before it answered the hello line")
            + f" (log {self.log_path}); its last lines: {self._tail()}"
        )
        if ready is not None and not ready.done():
            ready.set_exception(
                RuntimeError(
                    f"agent {self.spec.name!r}: {why}. Fix `command`, or run it by hand to see why it stops"
                )
            )
        for future in list(self.waiting.values()):
            if not future.done():
                future.set_exception(RuntimeError(why))

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.stdin.close()
            try:
                await asyncio.wait_for(self.proc.wait(), 5)
            except asyncio.TimeoutError:
                self.proc.kill()


def _message(line: str) -> dict[str, Any] | None:
    """A protocol line (the ready line, or an answer naming its episode), or None for other prints."""
    if not line.startswith("{"):
        return None
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not ("episode_id" in data or data.get("type") == "ready"):
        return None
    return data


def check_starts(spec: ProcessAgent, environ: dict[str, str] | None = None) -> None:
    """Start the agent's process once (in `environ`), hold the handshake and stop it: RuntimeError
    with the reason (it did not start, exited, or did not answer) before anything else of a run starts."""

    async def trial() -> None:
        process = AgentProcess(spec, environ)
        try:
            await process._ensure_running()
        finally:
            await process.stop()

    # on a thread of its own: the caller may be inside an event loop already (a notebook)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, trial()).result()


_PROCESSES: dict[tuple[int, str], AgentProcess] = {}  # by (gateway, spec as JSON)


def agent_process(spec: ProcessAgent, where: Gateway) -> AgentProcess:
    key = (id(where), spec.model_dump_json())
    if key not in _PROCESSES:
        _PROCESSES[key] = AgentProcess(spec)
        _PROCESSES[key].gateway = where
    return _PROCESSES[key]


class ProcessRun:
    """One episode of a process agent: a gateway session, and its turns sent to the process."""

    def __init__(
        self, spec: ProcessAgent, endpoint: LLMEndpoint, episode_id: str, task: Task, max_assistant_turns: int
    ) -> None:
        self.spec, self.endpoint, self.episode_id, self.task = spec, endpoint, episode_id, task
        self.max_assistant_turns = max_assistant_turns
        self.gateway = gateway(spec.gateway_host, spec.gateway_url_host)
        self.process = agent_process(spec, self.gateway)
        self.session: Session | None = None

    async def turn(self, user_turn: int, text: str) -> str | None:
        if self.session is None:
            self.session = self.gateway.open(self.endpoint, self.spec.name)
        message = {
            "type": "turn",
            "episode_id": self.episode_id,
            "user_turn": user_turn,
            "text": text,
            "base_url": self.session.base_url,
            "api_key": self.session.token,
            "model": self.spec.name,
            "max_assistant_turns": self.max_assistant_turns,
            "task": {"id": self.task.id, "system": self.task.system, "extra_info": self.task.extra_info},
        }
        answer = await asyncio.wrap_future(self.gateway.submit(self.process.ask(message)))
        error = answer.get("error")
        if error:
            return f"the agent process reported: {error}"
        if isinstance(answer.get("answer"), str) and answer["answer"]:
            self.endpoint.report_answer(answer["answer"])
        return None

    async def release(self) -> None:
        if self.session is not None:
            self.gateway.close(self.session)
        end = {"type": "end", "episode_id": self.episode_id}
        await asyncio.wrap_future(self.gateway.submit(self.process.tell(end)))
