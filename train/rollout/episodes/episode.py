"""One task run by an agent against its MCP tools, recorded token by token.

The episode owns the agent's LLM: every call lands in `complete`, which checks the episode's
limits and hands the call to `LLMCalls` (`llm_call.py`: the calling agent's ledger, a team keeping
one per agent, the policy's ids, the tool calls parsed from the sampled text, the `Reply`); this
module holds what ends an episode: statuses, turns, tool calls and their timeouts. The agent, started through its
driver (`rollout/episodes/driver.py`; AWorld's are `aworld/agent_spec.py` and `aworld/swarm_spec.py`),
executes the tools. The episode ends on the agent's final
answer, on max turns, on its timeout, when a tool call gets no answer in time
(the server hung or died), or on a malformed tool call; every ending is a
status, and nothing is ever written into the ledger that the policy or the
template did not produce (ARCHITECTURE.md invariants 1 and 2).
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from typing import Any

from aworld_train.core.errors import RewardError
from aworld_train.core.protocol import SERVER_DOWN_MARK
from aworld_train.rollout.episodes.agent_endpoint import ExternalAgent
from aworld_train.rollout.episodes.call_options import choice_problem, unoffered_problem
from aworld_train.rollout.episodes.driver import (
    AgentDriver,
    AgentRole,
    AgentRun,
    CallOptions,
    CallRefused,
    Reply,
    Reward,
)
from aworld_train.rollout.episodes.limits import CallEnded
from aworld_train.rollout.episodes.llm_call import LLMCalls, json_arguments, plain_message
from aworld_train.rollout.episodes.release import release_on_servers
from aworld_train.rollout.episodes.runtime import RolloutRuntime
from aworld_train.rollout.episodes.tool_servers import ToolServers, reachable, server_urls
from aworld_train.rollout.episodes.trajectory import FAILED_STATUSES, Task, ToolCallRecord, Trajectory
from aworld_train.rollout.tokens.templates.renderer import content_text

_TOOL_ERROR_PREFIXES = ("Error executing tool", "Failed to execute")
# AWorld's MCP client's report that a call's connection broke: its server died or stopped
# answering while the call was in flight, or before it. AWorld answers such a call with a result
# naming the transport's error (`Error calling tool SERVER__TOOL: TYPE: ...`: anyio's cancel scope
# torn down with the connection, httpx's connect and read errors) and then never finishes the
# agent's step: the episode ends here, as `tool_server_down`, rather than wait out its timeout.
_TRANSPORT_FAILURE = re.compile(
    r"^Error calling tool \S+: (CancelledError: Cancelled via cancel scope|ConnectError|ConnectTimeout|ReadError|"
    r"RemoteProtocolError|ClosedResourceError|BrokenResourceError|McpError: Connection closed|"
    r"RuntimeError: Failed to get server instance)"
)


class _Ended(Exception):
    pass


class Episode:
    def __init__(
        self,
        agent: AgentDriver,
        task: Task,
        runtime: RolloutRuntime,
        reward: Reward | None = None,
        episode_id: str | None = None,
        seed: int | None = None,
    ) -> None:
        self.agent = agent
        self.task = task
        self.runtime = runtime
        self.settings = runtime.settings
        self.reward = reward
        self.id = episode_id or uuid.uuid4().hex
        self.roles = {role.name: role for role in agent.roles()}
        self._external: dict[str, ExternalAgent] = {}  # agents answered by rollout.agent_endpoints
        self._callers: set[str] = set()  # agents that have called their LLM
        self.traj = Trajectory(episode_id=self.id, task_id=task.id, ground_truth=task.ground_truth)
        self.calls = LLMCalls(runtime, self.roles, self.traj, self.id, seed)  # serves the LLM calls
        self.check_call = self.calls.check_call  # the endpoint's check of a call, before it is taken
        self._ended = asyncio.Event()
        self._turn_calls = 0
        self._watchdog: asyncio.TimerHandle | None = None
        self._calls_by_id: dict[str, ToolCallRecord] = {}
        self._tool_servers = ToolServers(agent.mcp_config)  # each asked for its tools once an episode
        self._call_made: dict[str, float] = {}  # when each call's reply went to the agent
        self._started = 0.0
        self._user_turn = 0
        self._run: AgentRun | None = None

    # -- ending -------------------------------------------------------------
    def _end(self, status: str, error: str | None = None) -> None:
        if not self._ended.is_set():
            self.traj.status = status
            self.traj.error = error
            self._ended.set()

    async def _hold(self) -> Reply:
        """Never answer the agent again once the episode has ended; the runner is cancelled."""
        await asyncio.Event().wait()
        raise _Ended  # pragma: no cover

    def _arm_watchdog(self) -> None:
        loop = asyncio.get_running_loop()
        self._watchdog = loop.call_later(
            self.settings.tool_timeout_s, lambda: loop.create_task(self._tool_no_answer())
        )

    def _disarm_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    async def _tool_no_answer(self) -> None:
        down = [name for name, url in server_urls(self.agent.mcp_config) if not await reachable(url)]
        if down:
            self._end(
                "tool_server_down", f"MCP server(s) {', '.join(down)} stopped answering during a tool call"
            )
        else:
            self._end("tool_timeout", f"a tool call got no result within {self.settings.tool_timeout_s:g}s")

    # -- the LLM endpoint the agent calls --------------------------------------
    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        agent: str = "",
        options: CallOptions | None = None,
    ) -> Reply:
        return await self._serve(
            lambda: self._complete(messages, tools, self.calls.role(agent), options or CallOptions())
        )

    async def _serve(self, call):
        """One of the agent's LLM calls, answered by `call()`; never again once the episode ended."""
        self._disarm_watchdog()
        if self._ended.is_set():
            return await self._hold()
        try:
            return await call()
        except asyncio.CancelledError:
            raise
        except CallEnded as exc:
            self._end(exc.status, exc.error)
            return await self._hold()
        except CallRefused as exc:
            # the gateway refuses such calls before they get here (check_call): an in-process agent
            # would be retried by its framework with the same prompt
            status = "truncated" if exc.status == 413 else "error"
            self._end(status, str(exc))
            return await self._hold()
        except Exception as exc:
            # the agent's framework would retry (AWorld: with delays) and then report a generic
            # provider error: end the episode here, with the real cause.
            self._end("error", f"{type(exc).__name__} while serving the agent's LLM call: {exc}")
            return await self._hold()

    def ended(self) -> tuple[str, str | None] | None:
        """The status the episode ended with and why; None while it runs."""
        return (self.traj.status, self.traj.error) if self._ended.is_set() else None

    def report_answer(self, text: str) -> None:
        self.traj.final_answer = text

    def report_reward(self, reward: float, extras: dict[str, Any]) -> None:
        self.traj.reported_reward = float(reward)
        self.traj.reported_extras = dict(extras)

    async def _complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        role: AgentRole,
        options: CallOptions,
    ) -> Reply:
        self._collect_tool_results(messages)
        if self._ended.is_set():  # a tool server reported its backend down
            return await self._hold()
        missing = await self._tool_servers.missing(tools, role, first_call=role.name not in self._callers)
        if missing is not None:
            self._end(*missing)
            return await self._hold()
        self._callers.add(role.name)
        self._turn_calls += 1
        if self._turn_calls > self.settings.max_assistant_turns:
            self._end("max_turns")
            return await self._hold()
        if role.name in self.settings.agent_endpoints:
            return await self._complete_elsewhere(messages, tools, role)
        self.calls.check_chat(role, messages, tools, options)
        async with self.calls.ledger_lock(role):
            reply, parsed, turn = await self.calls.chat(
                messages, tools, role, options, used=set(self._calls_by_id)
            )
            if self.traj.finish_reasons[-1] == "length" and (parsed.calls or parsed.errors):
                inside = ", ".join(c.name for c in parsed.calls) or parsed.errors[0]
                self._end(
                    "truncated",
                    "the turn reached its token limit (rollout.max_new_tokens, the call's max_tokens or the "
                    f"episode's budget) inside a tool call, which is never run as if whole ({inside})",
                )
                return await self._hold()
            problems = [*parsed.errors, choice_problem(parsed, options), unoffered_problem(parsed, tools)]
            if any(problems):  # never answered: a gateway call reads 410 with this reason
                self._end("malformed_tool_call", "; ".join(p for p in problems if p))
                return await self._hold()
            self._made_calls(reply.tool_calls, [(c.name, c.arguments) for c in parsed.calls], turn, role)
            if not reply.tool_calls:
                self.traj.final_answer = reply.content
            return reply

    async def complete_text(
        self, prompt: str | list[int], agent: str = "", options: CallOptions | None = None
    ) -> list[Reply]:
        """A text completion (OpenAI's `/v1/completions`) in the agent's ledger: a reply per choice
        (its text the content), the first choice recorded. No tools are parsed: the caller reads the text."""
        return await self._serve(
            lambda: self._complete_text(prompt, self.calls.role(agent), options or CallOptions())
        )

    async def _complete_text(
        self, prompt: str | list[int], role: AgentRole, options: CallOptions
    ) -> list[Reply]:
        self._callers.add(role.name)
        self._turn_calls += 1
        if self._turn_calls > self.settings.max_assistant_turns:
            self._end("max_turns")
            return await self._hold()
        self.calls.check_call(role.name, prompt=prompt)
        async with self.calls.ledger_lock(role):
            return await self.calls.text(prompt, role, options)

    def _made_calls(
        self, calls: list[dict[str, Any]], parsed: list[tuple[str, Any]], turn: int, role: AgentRole
    ) -> None:
        """Record the calls an agent made, and wait for their results no longer than tool_timeout_s."""
        for call, (name, arguments) in zip(calls, parsed, strict=True):
            record = ToolCallRecord(
                call["id"], name, arguments, turn=turn, user_turn=self._user_turn, agent=role.name
            )
            self.traj.tool_calls.append(record)
            self._calls_by_id[call["id"]] = record
            self._call_made[call["id"]] = time.perf_counter()
        if calls:
            self._arm_watchdog()

    async def _complete_elsewhere(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, role: AgentRole
    ) -> Reply:
        """An agent of `rollout.agent_endpoints`: its endpoint answers, outside every ledger."""
        if role.name not in self._external:
            self._external[role.name] = ExternalAgent(self.settings.agent_endpoints[role.name])
        reply = await self._external[role.name].complete(messages, tools)
        turn = self.traj.num_turns
        self.traj.num_turns += 1
        self.traj.finish_reasons.append(reply.finish_reason)
        self.traj.messages = [plain_message(m) for m in messages] + [
            plain_message({"role": "assistant", "content": reply.content, "tool_calls": reply.tool_calls})
        ]
        parsed = [
            (c["function"]["name"], json_arguments(c["function"]["arguments"])) for c in reply.tool_calls
        ]
        self._made_calls(reply.tool_calls, parsed, turn, role)
        if not reply.tool_calls:
            self.traj.final_answer = reply.content
        return reply

    def _collect_tool_results(self, messages: list[dict[str, Any]]) -> None:
        """Record the tool results; a call whose server's backend was down ends the episode."""
        for msg in messages:
            if msg.get("role") != "tool":
                continue
            record = self._calls_by_id.get(msg.get("tool_call_id"))
            if record is not None and record.result is None:
                record.result = content_text(msg.get("content"))
                record.latency_s = round(time.perf_counter() - self._call_made[record.id], 4)
                record.error = record.result.startswith(_TOOL_ERROR_PREFIXES)
                if SERVER_DOWN_MARK in record.result:
                    self._end("tool_server_down", record.result)
                elif _TRANSPORT_FAILURE.match(record.result):
                    self._end(
                        "tool_server_down",
                        f"the connection of tool call {record.name!r} to its MCP server broke (the server "
                        f"stopped?): {record.result}",
                    )

    # -- running --------------------------------------------------------------
    async def run(self) -> Trajectory:
        started = self._started = time.perf_counter()
        try:
            await self._run_turns()
        except Exception as exc:  # the agent or its framework broke: keep the episode as data
            self._end("error", f"{type(exc).__name__}: {exc}")
        finally:
            self._ended.set()  # a cancelled episode's turn watcher must not outlive it
            self._disarm_watchdog()
            if self._run is not None:
                await self._run.release()  # what the agent's framework keeps for it
            for external in self._external.values():
                await external.client.close()
            await release_on_servers(self.agent.mcp_config, self.id)  # the tool servers' state for it
        self.traj.segments = [seg for ledger in self.calls.ledgers.values() for seg in ledger.segments]
        self.traj.timings = {
            "total_s": round(time.perf_counter() - started, 4),
            "policy_s": round(self.calls.policy_s, 4),
            "agent_s": round(self._agent_s(time.perf_counter()), 4),
        }
        self._score()
        return self.traj

    def _agent_s(self, now: float) -> float:
        """Time the agent and its tools took: wall time less time waiting for or inside the policy."""
        in_flight = now - min(self.calls.policy_calls.values()) if self.calls.policy_calls else 0.0
        return max(0.0, now - self._started - self.calls.policy_s - in_flight)

    async def _wait_turn(self, runner: asyncio.Future, ended: asyncio.Future) -> str | None:
        """Wait for the turn to finish; the limit it ran past, if any.

        Many episodes share one policy, so time queued for it is not the agent's: the
        agent clock stops while a policy call is in flight, and only the wall-clock limit
        counts it. Each wait is at most the agent time left, so a wait never overshoots it.
        """
        while True:
            now = time.perf_counter()
            wall_left = self._started + self.settings.episode_wall_timeout_s - now
            if wall_left <= 0:
                return f"episode_wall_timeout_s={self.settings.episode_wall_timeout_s:g} passed"
            agent_left = self.settings.episode_timeout_s - self._agent_s(now)
            if agent_left <= 0:
                return (
                    f"episode_timeout_s={self.settings.episode_timeout_s:g} of agent and tool time passed "
                    f"(time waiting for or inside the policy, {self.calls.policy_s:.1f}s, not counted)"
                )
            done, _ = await asyncio.wait(
                {runner, ended}, timeout=min(agent_left, wall_left), return_when=asyncio.FIRST_COMPLETED
            )
            if done:
                return None

    async def _run_turns(self) -> None:
        run = self._run = self.agent.start(self, self.id, self.task, self.settings.max_assistant_turns)
        for user_turn, turn_text in enumerate(self.task.user_turns):
            self._user_turn = user_turn
            self.traj.user_turns = user_turn + 1
            self._turn_calls = 0
            self.traj.final_answer = ""
            runner = asyncio.ensure_future(run.turn(user_turn, turn_text))
            ended = asyncio.ensure_future(self._ended.wait())
            passed = await self._wait_turn(runner, ended)
            ended.cancel()
            if passed is not None or not runner.done():
                runner.cancel()
                await asyncio.wait({runner}, timeout=5)
                self._end("timeout", passed)
                return  # a status set earlier (max_turns, tool_timeout, ...) stays
            failed = runner.result()  # raises what the agent raised
            if self._ended.is_set():
                return
            if failed is not None:
                # an agent that gives up on a reply cut at its token limit (a structured answer that
                # does not parse) failed for that reason: the episode was truncated
                cut = bool(self.traj.finish_reasons) and self.traj.finish_reasons[-1] == "length"
                self._end("truncated" if cut else "error", failed)
                return
        if self.traj.num_turns == 0:
            self._end("error", "the agent finished without calling its LLM")
        self._end("ok")

    def _score(self) -> None:
        score(self.traj, self.task, self.reward)


def score(traj: Trajectory, task: Task, reward: Reward | None) -> None:
    """Set the trajectory's reward (or reward_error status) from `reward`; failed episodes get none."""
    if reward is None or traj.status in FAILED_STATUSES - {"reward_error"}:
        return
    if traj.status == "malformed_tool_call":
        traj.reward = 0.0
        return
    try:
        traj.reward, traj.reward_extras = reward(traj, task.sample())
    except RewardError as exc:
        traj.status, traj.error = "reward_error", str(exc)
    except Exception as exc:
        traj.status, traj.error = (
            "reward_error",
            f"reward function {reward.reference} raised {type(exc).__name__}: {exc}",
        )
