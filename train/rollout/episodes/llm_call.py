"""The part of an episode that serves its agents' LLM calls: each agent's token ledger, the
policy's choices within the token limits, and the replies the agents read. What a call runs into
that ends the episode (a token limit: `limits.py`) is raised as `CallEnded`; the episode (`episode.py`) holds
the statuses, turns, tool calls and timeouts."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from aworld_train.rollout.episodes.call_options import (
    check_options,
    first_call_only,
    forced_opening,
    grammar_key,
)
from aworld_train.rollout.episodes.driver import AgentRole, CallOptions, CallRefused, Reply
from aworld_train.rollout.episodes.limits import CallEnded, token_budget
from aworld_train.rollout.episodes.runtime import RolloutRuntime
from aworld_train.rollout.episodes.trajectory import Trajectory
from aworld_train.rollout.policies.client import Generation, GrammarKey, SamplingParams, derive_seed
from aworld_train.rollout.tokens.calls.parsers.base import ParseResult
from aworld_train.rollout.tokens.ledger import TokenLedger
from aworld_train.rollout.tokens.templates.prompt_bounds import (
    least_tokens,
    longest_token_chars,
    message_chars,
)
from aworld_train.rollout.tokens.templates.renderer import content_text

# a call whose text is longer is tokenized on a thread: tokenizing 20k characters takes some 15 ms
# (the tokenizer releases the GIL), more than the hop costs, and the episode's loop serves others
_THREAD_CHARS = 20_000


class LLMCalls:
    def __init__(
        self,
        runtime: RolloutRuntime,
        roles: dict[str, AgentRole],
        traj: Trajectory,
        episode_id: str,
        seed: int | None,
    ) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.roles = roles
        self.traj = traj  # the record the calls write: turns, messages, prompt inputs, final answer
        self.id = episode_id
        self.seed = seed  # fixes the sampling of every policy call (see derive_seed)
        self.ledgers: dict[str, TokenLedger] = {}  # by agent, in the order they first called
        # held by a call from its prompt to its record: calls of one agent that overlap (parallel
        # calls of an agent framework, sub-agents sharing a client) take the ledger one at a time,
        # so each call's sampled ids follow its own prompt; one whose messages do not extend the
        # answer before it starts a segment of its own
        self._ledger_locks: dict[str, asyncio.Lock] = {}
        self.policy_s = 0.0
        self.policy_calls: dict[object, float] = {}  # policy calls in flight, by their start

    def check_call(
        self,
        agent: str = "",
        messages: list[dict[str, Any]] | None = None,
        tools: list[dict[str, Any]] | None = None,
        prompt: str | list[int] | None = None,
        options: CallOptions | None = None,
    ) -> None:
        """CallRefused for a call whose text is longer than max_total_tokens could hold even at the
        vocabulary's longest token (413), or whose token ids are outside the vocabulary (400)."""
        if options is not None and prompt is None:
            check_options(self.runtime, tools, options, self.role(agent).name)
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

    def check_chat(
        self, role: AgentRole, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, options
    ) -> None:
        """`check_call` of an in-process chat call: one too long for the run that would begin a
        segment (the agent rewrote its history) ends the episode `segment_too_long`, as the budget
        of a rewritten prompt does (limits.py)."""
        try:
            self.check_call(role.name, messages=messages, tools=tools, options=options)
        except CallRefused as exc:
            ledger = self.ledgers.get(role.name)
            rewrite = ledger is not None and bool(ledger.segments) and not ledger.extends(messages, tools)
            if exc.status == 413 and rewrite:
                raise CallEnded(
                    "segment_too_long", f"agent {role.name!r} rewrote its history: {exc}"
                ) from exc
            raise

    async def tokenized(self, chars: int, render, *args) -> list[int]:
        """`render(*args)`, on a thread when the text is long (the loop serves other episodes)."""
        if chars > _THREAD_CHARS:
            return await asyncio.to_thread(render, *args)
        return render(*args)

    def ledger_lock(self, role: AgentRole) -> asyncio.Lock:
        return self._ledger_locks.setdefault(role.name, asyncio.Lock())

    def role(self, agent: str) -> AgentRole:
        if not agent:
            return next(iter(self.roles.values()))
        if agent not in self.roles:
            raise ValueError(f"agent {agent!r} is not one of the driver's agents ({', '.join(self.roles)})")
        return self.roles[agent]

    def ledger(self, role: AgentRole) -> TokenLedger:
        if role.name not in self.ledgers:
            renderer, stops = self.runtime.renderer, self.runtime.stop_token_ids
            self.ledgers[role.name] = TokenLedger(renderer, stops, role.few_shot, agent=role.name)
        return self.ledgers[role.name]

    async def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        role: AgentRole,
        options: CallOptions,
        *,
        used: set[str],
    ) -> tuple[Reply, ParseResult, int]:
        """One chat call of `role` in its ledger (the caller holds `ledger_lock(role)`): the policy's
        choices, the first recorded; the reply, its parse and the turn it was sampled at. Call ids in
        `used` are not reused."""
        ledger = self.ledger(role)
        first_prompt = not ledger.segments
        prompt_ids = await self.tokenized(message_chars(messages), ledger.prompt, messages, tools)
        opening = self.runtime.renderer.encode(forced_opening(self.runtime, options))
        if opening:
            prompt_ids = ledger.lead(opening)
        turn = self.traj.num_turns
        grammar = grammar_key(self.runtime, tools, options)
        gens = await self.sample(ledger, prompt_ids, first_prompt, role, options, grammar)
        gens = [first_call_only(self.runtime, gen, options) for gen in gens]
        replies = [
            self.reply_for(
                gen, tools, turn, k, used=used, prompt_ids=prompt_ids, options=options, opening=opening
            )
            for k, gen in enumerate(gens)
        ]
        reply, parsed = replies[0]
        self.traj.forced_calls += bool(opening)
        self.traj.constrained_tokens += gens[0].meta.get("constrained_tokens", 0)
        assistant: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            assistant["tool_calls"] = reply.tool_calls
        ledger.record(gens[0], assistant)  # the first choice extends the ledger
        self.traj.messages = [plain_message(m) for m in messages] + [plain_message(assistant)]
        self.traj.prompt_inputs[role.name] = {
            "messages": [*messages, assistant],  # as the ledger read them (OpenAI's form)
            "tools": tools,
            "few_shot": role.few_shot,
        }
        reply.others = [other for other, _ in replies[1:]]
        return reply, parsed, turn

    async def sample(
        self,
        ledger: TokenLedger,
        prompt_ids: list[int],
        first_prompt: bool,
        role: AgentRole,
        options: CallOptions,
        grammar: GrammarKey | None = None,
    ) -> list[Generation]:
        """The policy's choices for the next call of `role` on `prompt_ids` (under `grammar`, if
        any), the call counted as a turn; CallEnded where a token limit ends the episode."""
        budget = token_budget(self.settings, ledger, prompt_ids, first_prompt, role.name)
        seed = self.seed if self.seed is not None else options.seed
        sampling = SamplingParams(
            max_new_tokens=min(self.settings.max_new_tokens, budget, options.max_tokens or budget),
            temperature=self.settings.temperature,
            top_p=self.settings.top_p,
            top_k=self.settings.top_k,
            seed=None if seed is None else derive_seed(seed, self.traj.num_turns),
            grammar=grammar,
        )
        gens = await self.generate(prompt_ids, sampling, options, role)
        self.traj.num_turns += 1
        self.traj.finish_reasons.append(gens[0].finish_reason)
        return gens

    async def text(self, prompt: str | list[int], role: AgentRole, options: CallOptions) -> list[Reply]:
        """One text completion of `role` in its ledger (the caller holds `ledger_lock(role)`): a
        reply per choice, the first recorded."""
        ledger = self.ledger(role)
        first_prompt = not ledger.segments
        chars = len(prompt) if isinstance(prompt, str) else 0
        prompt_ids = await self.tokenized(chars, ledger.text_prompt, prompt)
        turn = self.traj.num_turns
        gens = await self.sample(ledger, prompt_ids, first_prompt, role, options)
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

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingParams, options: CallOptions, role: AgentRole
    ) -> list[Generation]:
        """`options.n` generations of one prompt (each with its own seed) by the policy that serves
        `role`, cut at `options.stop`."""
        call, since = object(), time.perf_counter()
        self.policy_calls[call] = since  # an agent may call again before an earlier call returned
        samplings = [sampling] + [
            replace(sampling, seed=None if sampling.seed is None else derive_seed(sampling.seed, k))
            for k in range(1, options.n)
        ]
        try:
            policy = self.runtime.router.route(role.name)
            gens = await asyncio.gather(*(policy.generate(prompt_ids, s) for s in samplings))
        finally:
            del self.policy_calls[call]
            self.policy_s += time.perf_counter() - since
        tokenizer = self.runtime.renderer.tokenizer
        return [cut_at_stop(tokenizer, gen, options.stop) for gen in gens]

    def reply_for(
        self,
        gen: Generation,
        tools: list[dict[str, Any]] | None,
        turn: int,
        choice: int,
        *,
        used: set[str],
        prompt_ids: list[int],
        options: CallOptions,
        opening: Sequence[int] = (),
    ) -> tuple[Reply, ParseResult]:
        """One choice as the agent reads it (after the `opening` ids of a forced call, which the
        parser reads with it), and its parse; call ids in `used` are not reused."""
        renderer = self.runtime.renderer
        text = before_stop(
            sampled_text(renderer.tokenizer, gen, self.runtime.stop_token_ids, opening), options.stop
        )
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


def sampled_text(tokenizer, gen, stop_token_ids, opening: Sequence[int] = ()) -> str:
    """The text of a generation for the tool-call parser: special tokens kept (they frame the
    calls of GLM, Kimi-K2, DeepSeek, gpt-oss), the stop token that ended the turn left out; after
    the `opening` ids of a forced call (decoded with it: a tokenizer may write a space at a token's
    start only after another token)."""
    ids = [*opening, *gen.token_ids]
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


def plain_message(message: dict[str, Any]) -> dict[str, Any]:
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


def json_arguments(text: str) -> Any:
    try:
        return json.loads(text or "{}")
    except json.JSONDecodeError:
        return text
