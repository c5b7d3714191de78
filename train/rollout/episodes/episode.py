"""One task run by an agent against its MCP tools, recorded token by token.

The episode owns the agent's LLM: every call lands in `complete`, which extends
the calling agent's ledger (a team keeps one per agent), asks the policy for ids, parses tool
calls from the sampled text and answers the agent (a `Reply`). The agent, started through its
driver (`rollout/episodes/driver.py`; AWorld's are `aworld/agent_spec.py` and `aworld/swarm_spec.py`),
executes the tools. The episode ends on the agent's final
answer, on max turns, on its timeout, when a tool call gets no answer in time
(the server hung or died), or on a malformed tool call; every ending is a
status, and nothing is ever written into the ledger that the policy or the
template did not produce (ARCHITECTURE.md invariants 1 and 2).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from dataclasses import replace
from typing import Any
from urllib.parse import urlparse

from aworld_train.core.errors import RewardError
from aworld_train.core.protocol import SERVER_DOWN_MARK, MissingVariable, resolve_env_refs
from aworld_train.rollout.episodes.agent_endpoint import ExternalAgent
from aworld_train.rollout.episodes.driver import (
    AgentDriver,
    AgentRole,
    AgentRun,
    CallOptions,
    CallRefused,
    Reply,
    Reward,
)
from aworld_train.rollout.episodes.release import release_on_servers
from aworld_train.rollout.episodes.runtime import RolloutRuntime
from aworld_train.rollout.episodes.trajectory import FAILED_STATUSES, Task, ToolCallRecord, Trajectory
from aworld_train.rollout.policies.client import Generation, SamplingParams, derive_seed
from aworld_train.rollout.tokens.chat import content_text
from aworld_train.rollout.tokens.ledger import TokenLedger
from aworld_train.rollout.tokens.parsers.base import ParseResult
from aworld_train.rollout.tokens.prompt_bounds import least_tokens, longest_token_chars, message_chars

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
# a call whose text is longer is tokenized on a thread: tokenizing 20k characters takes some 15 ms
# (the tokenizer releases the GIL), more than the hop costs, and the episode's loop serves others
_THREAD_CHARS = 20_000


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
        self.seed = seed  # fixes the sampling of every policy call (see derive_seed)
        self.task = task
        self.runtime = runtime
        self.settings = runtime.settings
        self.reward = reward
        self.id = episode_id or uuid.uuid4().hex
        self.roles = {role.name: role for role in agent.roles()}
        self.ledgers: dict[str, TokenLedger] = {}  # by agent, in the order they first called
        # held by a call from its prompt to its record: calls of one agent that overlap (parallel
        # calls of an agent framework, sub-agents sharing a client) take the ledger one at a time,
        # so each call's sampled ids follow its own prompt; one whose messages do not extend the
        # answer before it starts a segment of its own
        self._ledger_locks: dict[str, asyncio.Lock] = {}
        self._external: dict[str, ExternalAgent] = {}  # agents answered by rollout.agent_endpoints
        self._callers: set[str] = set()  # agents that have called their LLM
        self.traj = Trajectory(episode_id=self.id, task_id=task.id, ground_truth=task.ground_truth)
        self._ended = asyncio.Event()
        self._turn_calls = 0
        self._watchdog: asyncio.TimerHandle | None = None
        self._calls_by_id: dict[str, ToolCallRecord] = {}
        self._call_made: dict[str, float] = {}  # when each call's reply went to the agent
        self._policy_s = 0.0
        self._policy_calls: dict[object, float] = {}  # policy calls in flight, by their start
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
        down = [name for name, url in self._server_urls() if not await _reachable(url)]
        if down:
            self._end(
                "tool_server_down", f"MCP server(s) {', '.join(down)} stopped answering during a tool call"
            )
        else:
            self._end("tool_timeout", f"a tool call got no result within {self.settings.tool_timeout_s:g}s")

    def _server_urls(self) -> list[tuple[str, str]]:
        servers = (self.agent.mcp_config.get("mcpServers") or {}).items()
        return [(n, _resolved(c["url"])) for n, c in servers if isinstance(c, dict) and c.get("url")]

    async def _tools_missing(
        self, tools: list[dict[str, Any]] | None, role: AgentRole, first_call: bool
    ) -> tuple[str, str] | None:
        """A configured MCP server that gave the agent no tools: (status, error), or None.

        AWorld drops a server that does not answer and the agent goes on without its
        tools (every call it makes is answered "can not find ... tool"), so this is
        checked before each agent's first LLM call of an episode, and whenever no tools arrive.
        """
        if not first_call and tools:
            return None
        configured = [n for n in role.mcp_servers if n in (self.agent.mcp_config.get("mcpServers") or {})]
        urls = dict(self._server_urls())
        down = [f"{n!r} at {urls[n]}" for n in configured if n in urls and not await _reachable(urls[n])]
        if down:
            return (
                "tool_server_down",
                f"MCP server(s) {', '.join(down)} did not answer: the agent got no tools",
            )
        if configured and not tools:
            names = ", ".join(f"{n!r}" + (f" at {urls[n]}" if n in urls else " (stdio)") for n in configured)
            status = "error" if all(n in urls for n in configured) else "tool_server_down"
            return status, f"MCP server(s) {names} listed no tools"
        return None

    # -- the LLM endpoint the agent calls --------------------------------------
    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        agent: str = "",
        options: CallOptions | None = None,
    ) -> Reply:
        return await self._serve(
            lambda: self._complete(messages, tools, self._role(agent), options or CallOptions())
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

    def report_reward(self, reward: float, extras: dict[str, Any]) -> None:
        self.traj.reported_reward = float(reward)
        self.traj.reported_extras = dict(extras)

    def check_call(
        self,
        agent: str = "",
        messages: list[dict[str, Any]] | None = None,
        tools: list[dict[str, Any]] | None = None,
        prompt: str | list[int] | None = None,
    ) -> None:
        """CallRefused for a call whose text is longer than max_total_tokens could hold even at the
        vocabulary's longest token (413), or whose token ids are outside the vocabulary (400)."""
        tokenizer = self.runtime.renderer.tokenizer
        budget = self.settings.max_total_tokens
        if isinstance(prompt, list):
            vocabulary = len(tokenizer)
            bad = next((i for i, t in enumerate(prompt) if not 0 <= t < vocabulary), None)
            if bad is not None:
                raise CallRefused(
                    f"prompt[{bad}]: token id {prompt[bad]} is outside the vocabulary (0 to {vocabulary - 1}): "
                    "send ids of this run's tokenizer",
                    f"prompt[{bad}]",
                )
            if len(prompt) > budget:
                raise CallRefused(
                    f"the prompt has {len(prompt)} token ids, over rollout.max_total_tokens={budget}: shorten it",
                    "prompt",
                    413,
                    "request_too_large",
                )
            return
        chars, field = (
            (len(prompt), "prompt")
            if isinstance(prompt, str)
            else (message_chars(messages or []), "messages")
        )
        if least_tokens(chars, tokenizer) > budget:
            raise CallRefused(
                f"{field}: {chars} characters, at least {least_tokens(chars, tokenizer)} tokens (no token "
                f"of this vocabulary is longer than {longest_token_chars(tokenizer)} characters), over "
                f"rollout.max_total_tokens={budget}: shorten the conversation",
                field,
                413,
                "request_too_large",
            )

    async def _tokenized(self, chars: int, render, *args) -> list[int]:
        """`render(*args)`, on a thread when the text is long (the loop serves other episodes)."""
        if chars > _THREAD_CHARS:
            return await asyncio.to_thread(render, *args)
        return render(*args)

    def _ledger_lock(self, role: AgentRole) -> asyncio.Lock:
        return self._ledger_locks.setdefault(role.name, asyncio.Lock())

    def _role(self, agent: str) -> AgentRole:
        if not agent:
            return next(iter(self.roles.values()))
        if agent not in self.roles:
            raise ValueError(f"agent {agent!r} is not one of the driver's agents ({', '.join(self.roles)})")
        return self.roles[agent]

    def _ledger(self, role: AgentRole) -> TokenLedger:
        if role.name not in self.ledgers:
            renderer, stops = self.runtime.renderer, self.runtime.stop_token_ids
            self.ledgers[role.name] = TokenLedger(renderer, stops, role.few_shot, agent=role.name)
        return self.ledgers[role.name]

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
        missing = await self._tools_missing(tools, role, first_call=role.name not in self._callers)
        if missing is not None:
            self._end(*missing)
            return await self._hold()
        self._callers.add(role.name)
        self._turn_calls += 1
        if self._turn_calls > self.settings.max_turns:
            self._end("max_turns")
            return await self._hold()
        if role.name in self.settings.agent_endpoints:
            return await self._complete_elsewhere(messages, tools, role)
        self.check_call(role.name, messages=messages, tools=tools)
        async with self._ledger_lock(role):
            return await self._complete_in_ledger(messages, tools, role, options)

    async def _complete_in_ledger(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        role: AgentRole,
        options: CallOptions,
    ) -> Reply:
        ledger = self._ledger(role)
        first_prompt = not ledger.segments
        prompt_ids = await self._tokenized(message_chars(messages), ledger.prompt, messages, tools)
        turn = self.traj.num_turns
        gens = await self._sample(ledger, prompt_ids, first_prompt, role, options)
        if gens is None:
            return await self._hold()
        used = set(self._calls_by_id)
        replies = [self._reply(gen, tools, turn, k, used, prompt_ids, options) for k, gen in enumerate(gens)]
        reply, parsed = replies[0]
        assistant: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            assistant["tool_calls"] = reply.tool_calls
        ledger.record(gens[0], assistant)  # the first choice extends the ledger
        self.traj.messages = [_plain(m) for m in messages] + [_plain(assistant)]
        self.traj.prompt_inputs[role.name] = {
            "messages": [*messages, assistant],  # as the ledger read them (OpenAI's form)
            "tools": tools,
            "few_shot": role.few_shot,
        }
        if parsed.malformed:
            self._end("malformed_tool_call", "; ".join(parsed.errors))
            return await self._hold()
        self._made_calls(reply.tool_calls, [(c.name, c.arguments) for c in parsed.calls], turn, role)
        if not reply.tool_calls:
            self.traj.final_answer = reply.content
        reply.others = [other for other, _ in replies[1:]]
        return reply

    async def _sample(
        self,
        ledger: TokenLedger,
        prompt_ids: list[int],
        first_prompt: bool,
        role: AgentRole,
        options: CallOptions,
    ) -> list[Generation] | None:
        """The policy's choices for the next call of `role` on `prompt_ids`, the call counted as a
        turn; None if a limit ended the episode."""
        if (
            first_prompt
            and self.settings.max_prompt_tokens
            and len(prompt_ids) > self.settings.max_prompt_tokens
        ):
            # never cut the prompt: a left-truncated prompt is not what the ledger holds
            self._end(
                "prompt_too_long",
                f"the first prompt of agent {role.name!r} has {len(prompt_ids)} tokens, over max_prompt_tokens={self.settings.max_prompt_tokens}",
            )
            return None
        budget = self.settings.max_total_tokens - len(prompt_ids)
        if self.settings.max_response_tokens is not None:
            first = ledger.segments[0]
            used = len(ledger) - len(first.prompt_ids) if len(ledger.segments) == 1 else len(ledger)
            budget = min(budget, self.settings.max_response_tokens - used)
        if budget <= 0:
            self._end(
                "truncated",
                f"no tokens left (max_total_tokens={self.settings.max_total_tokens}, "
                f"max_response_tokens={self.settings.max_response_tokens})",
            )
            return None
        seed = self.seed if self.seed is not None else options.seed
        sampling = SamplingParams(
            max_new_tokens=min(self.settings.max_new_tokens, budget, options.max_tokens or budget),
            temperature=self.settings.temperature,
            top_p=self.settings.top_p,
            top_k=self.settings.top_k,
            seed=None if seed is None else derive_seed(seed, self.traj.num_turns),
        )
        gens = await self._generate(prompt_ids, sampling, options)
        self.traj.num_turns += 1
        self.traj.finish_reasons.append(gens[0].finish_reason)
        return gens

    async def complete_text(
        self, prompt: str | list[int], agent: str = "", options: CallOptions | None = None
    ) -> list[Reply]:
        """A text completion (OpenAI's `/v1/completions`) in the agent's ledger: a reply per choice
        (its text the content), the first choice recorded. No tools are parsed: the caller reads the text."""
        return await self._serve(
            lambda: self._complete_text(prompt, self._role(agent), options or CallOptions())
        )

    async def _complete_text(
        self, prompt: str | list[int], role: AgentRole, options: CallOptions
    ) -> list[Reply]:
        self._callers.add(role.name)
        self._turn_calls += 1
        if self._turn_calls > self.settings.max_turns:
            self._end("max_turns")
            return await self._hold()
        self.check_call(role.name, prompt=prompt)
        async with self._ledger_lock(role):
            return await self._complete_text_in_ledger(prompt, role, options)

    async def _complete_text_in_ledger(
        self, prompt: str | list[int], role: AgentRole, options: CallOptions
    ) -> list[Reply]:
        ledger = self._ledger(role)
        first_prompt = not ledger.segments
        chars = len(prompt) if isinstance(prompt, str) else 0
        prompt_ids = await self._tokenized(chars, ledger.text_prompt, prompt)
        turn = self.traj.num_turns
        gens = await self._sample(ledger, prompt_ids, first_prompt, role, options)
        if gens is None:
            return await self._hold()
        tokenizer = self.runtime.renderer.tokenizer
        replies = [
            Reply(
                id=f"{self.id}-{turn}" + (f"-{k}" if k else ""),
                content=before_stop(sampled_text(tokenizer, gen, self.runtime.stop_token_ids), options.stop),
                finish_reason="length" if gen.finish_reason == "length" else "stop",
                usage={"prompt_tokens": len(prompt_ids), "completion_tokens": len(gen.token_ids)},
                logprobs=token_logprobs(tokenizer, gen) if options.logprobs else None,
            )
            for k, gen in enumerate(gens)
        ]
        ledger.record_text(gens[0], replies[0].content)
        self.traj.final_answer = replies[0].content
        return replies

    async def _generate(
        self, prompt_ids: list[int], sampling: SamplingParams, options: CallOptions
    ) -> list[Generation]:
        """`options.n` generations of one prompt (each with its own seed), cut at `options.stop`."""
        call, since = object(), time.perf_counter()
        self._policy_calls[call] = since  # an agent may call again before an earlier call returned
        samplings = [sampling] + [
            replace(sampling, seed=None if sampling.seed is None else derive_seed(sampling.seed, k))
            for k in range(1, options.n)
        ]
        try:
            gens = await asyncio.gather(*(self.runtime.policy.generate(prompt_ids, s) for s in samplings))
        finally:
            del self._policy_calls[call]
            self._policy_s += time.perf_counter() - since
        tokenizer = self.runtime.renderer.tokenizer
        return [cut_at_stop(tokenizer, gen, options.stop) for gen in gens]

    def _reply(
        self,
        gen: Generation,
        tools: list[dict[str, Any]] | None,
        turn: int,
        choice: int,
        used: set[str],
        prompt_ids: list[int],
        options: CallOptions,
    ) -> tuple[Reply, ParseResult]:
        """One choice as the agent reads it, and its parse; call ids in `used` are not reused."""
        renderer = self.runtime.renderer
        text = before_stop(sampled_text(renderer.tokenizer, gen, self.runtime.stop_token_ids), options.stop)
        parsed = self.runtime.calls.parse(text, tools)
        calls = []
        for i, c in enumerate(parsed.calls):
            call_id = renderer.family.call_id(c, turn, i, used)
            used.add(call_id)
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
            )
        logprobs = token_logprobs(renderer.tokenizer, gen) if options.logprobs else None
        reply = Reply(
            id=f"{self.id}-{turn}" + (f"-{choice}" if choice else ""),
            content=visible_text(renderer.tokenizer, parsed.content),
            tool_calls=calls,
            finish_reason="tool_calls" if calls else ("length" if gen.finish_reason == "length" else "stop"),
            usage={
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(gen.token_ids),
                "total_tokens": len(prompt_ids) + len(gen.token_ids),
            },
            logprobs=logprobs,
        )
        return reply, parsed

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
        self.traj.messages = [_plain(m) for m in messages] + [
            _plain({"role": "assistant", "content": reply.content, "tool_calls": reply.tool_calls})
        ]
        parsed = [(c["function"]["name"], _arguments(c["function"]["arguments"])) for c in reply.tool_calls]
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
        self.traj.segments = [seg for ledger in self.ledgers.values() for seg in ledger.segments]
        self.traj.timings = {
            "total_s": round(time.perf_counter() - started, 4),
            "policy_s": round(self._policy_s, 4),
            "agent_s": round(self._agent_s(time.perf_counter()), 4),
        }
        self._score()
        return self.traj

    def _agent_s(self, now: float) -> float:
        """Time the agent and its tools took: wall time less time waiting for or inside the policy."""
        in_flight = now - min(self._policy_calls.values()) if self._policy_calls else 0.0
        return max(0.0, now - self._started - self._policy_s - in_flight)

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
                    f"(time waiting for or inside the policy, {self._policy_s:.1f}s, not counted)"
                )
            done, _ = await asyncio.wait(
                {runner, ended}, timeout=min(agent_left, wall_left), return_when=asyncio.FIRST_COMPLETED
            )
            if done:
                return None

    async def _run_turns(self) -> None:
        run = self._run = self.agent.start(self, self.id, self.task, self.settings.max_turns)
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
                self._end("error", failed)
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


def sampled_text(tokenizer, gen, stop_token_ids) -> str:
    """The text of a generation for the tool-call parser: special tokens kept (they frame the
    calls of GLM, Kimi-K2, DeepSeek, gpt-oss), the stop token that ended the turn left out."""
    ids = list(gen.token_ids)
    if gen.finish_reason == "stop" and ids and ids[-1] in stop_token_ids:
        ids = ids[:-1]
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def cut_at_stop(tokenizer, gen: Generation, stop: tuple[str, ...]) -> Generation:
    """`gen` ended at the first id whose text completes one of `stop` (an OpenAI `stop`); the ids
    kept are all sampled ones, so the ledger stays exact, and the answer's text ends before it."""
    if not stop:
        return gen
    text = tokenizer.decode(gen.token_ids, skip_special_tokens=False)
    if not any(s in text for s in stop):
        return gen
    for end in range(1, len(gen.token_ids) + 1):
        text = tokenizer.decode(gen.token_ids[:end], skip_special_tokens=False)
        if any(s in text for s in stop):
            return gen.head(end, "stop")
    return gen  # pragma: no cover (the whole text holds a stop string)


def before_stop(text: str, stop: tuple[str, ...]) -> str:
    """`text` up to the first of the stop strings that `cut_at_stop` ended it at."""
    for string in stop:
        text = text.split(string, 1)[0]
    return text


def token_logprobs(tokenizer, gen: Generation) -> list[tuple[str, float]]:
    """Each sampled id's text and logprob, as OpenAI's `logprobs` give them."""
    return [(tokenizer.decode([t]), float(lp)) for t, lp in zip(gen.token_ids, gen.logprobs, strict=True)]


def visible_text(tokenizer, text: str) -> str:
    """`text` without the tokenizer's special tokens: what the agent and the reward read."""
    for token in sorted(tokenizer.all_special_tokens, key=len, reverse=True):
        text = text.replace(token, "")
    return text.strip()


def _plain(message: dict[str, Any]) -> dict[str, Any]:
    out = {"role": message.get("role"), "content": content_text(message.get("content"))}
    for key in ("tool_calls", "tool_call_id"):
        if message.get(key):
            out[key] = (
                [
                    {
                        "id": c.get("id"),
                        "name": c.get("function", {}).get("name"),
                        "arguments": c.get("function", {}).get("arguments"),
                    }
                    for c in message[key]
                ]
                if key == "tool_calls"
                else message[key]
            )
    return out


def _arguments(text: str) -> Any:
    try:
        return json.loads(text or "{}")
    except json.JSONDecodeError:
        return text


def _resolved(url: str) -> str:
    """A URL with its `${VAR}` references resolved, as the agent's MCP client sees it."""
    try:
        return resolve_env_refs(url)
    except MissingVariable:
        return url


async def _reachable(url: str, timeout: float = 2.0) -> bool:
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(parsed.hostname, port), timeout)
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    return True
