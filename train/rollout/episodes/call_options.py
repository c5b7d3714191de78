"""What a call's options (`CallOptions`: a client's tool_choice, parallel_tool_calls and response
format) ask of an episode, and how each is honoured without a token the policy did not sample
becoming loss:

- before anything is tokenized, `check_options` refuses (CallRefused, naming the parameter and the
  fix) what this run cannot honour: a named tool the call does not offer, a call format that cannot
  be forced or ended after one call (`rollout/tokens/calls/forcing.py`), a schema asked of a policy
  that cannot sample under a grammar;
- a forced call opens with the template's call text (`forced_opening`), which the ledger holds as
  prompt (mask 0) before the policy samples the rest;
- a response format is a grammar the policy samples under (`grammar_key`,
  `rollout/policies/grammar.py`);
- a turn that may hold one call is ended after its first call's closing text (`first_call_only`);
- a turn that breaks its tool_choice is malformed (`choice_problem`), and so is a turn that calls a
  tool the call does not offer (`unoffered_problem`): the policy's own mistake, which no agent can
  run, ended and recorded the same on every path (in process, through the gateway) before any
  framework sees the call.
"""

from __future__ import annotations

import json
from typing import Any

from aworld_train.rollout.episodes.driver import CallOptions, CallRefused
from aworld_train.rollout.episodes.runtime import RolloutRuntime
from aworld_train.rollout.policies.client import ConstrainedSampling, Generation, GrammarKey
from aworld_train.rollout.tokens.calls.forcing import NotControllable
from aworld_train.rollout.tokens.calls.parsers.base import ParseResult


def tool_names(tools: list[dict[str, Any]] | None) -> list[str]:
    return [(t.get("function") or t).get("name", "") for t in tools or []]


def check_options(
    runtime: RolloutRuntime, tools: list[dict[str, Any]] | None, options: CallOptions, agent: str = ""
) -> None:
    """CallRefused (400, naming the parameter and the fix) for options this run cannot honour for
    `agent`'s call."""
    if options.tool_choice in ("required", "function"):
        _check_forced_call(runtime, tools, options)
    if not options.parallel_tool_calls and tools:
        _check_single_call(runtime)
    key = grammar_key(runtime, tools, options)
    if key is not None:
        _check_grammar(runtime, agent, key)


def _check_forced_call(
    runtime: RolloutRuntime, tools: list[dict[str, Any]] | None, options: CallOptions
) -> None:
    """tool_choice required or a named function: tools offered, the named one among them, and a
    chat template whose call opening can be forced."""
    if not tools:
        raise CallRefused(
            f"tool_choice={options.tool_choice!r} forces a tool call, but the call offers no tools: "
            "send the tools, or leave tool_choice out",
            "tool_choice",
        )
    if options.tool_name is not None and options.tool_name not in tool_names(tools):
        raise CallRefused(
            f"tool_choice names the tool {options.tool_name!r}, which is not among the call's tools "
            f"({', '.join(tool_names(tools))}): name one of them",
            "tool_choice",
        )
    try:
        runtime.call_control.forced_opening(options.tool_name)
    except NotControllable as exc:
        raise CallRefused(
            f"tool_choice={options.tool_choice!r} cannot be forced with this chat template: {exc}. "
            "Leave tool_choice 'auto' (the policy decides whether to call)",
            "tool_choice",
        ) from None


def _check_single_call(runtime: RolloutRuntime) -> None:
    """parallel_tool_calls=false: the chat template marks where a call ends, so sampling can stop there."""
    try:
        runtime.call_control.call_end()
    except NotControllable as exc:
        raise CallRefused(
            f"parallel_tool_calls=false cannot be honoured with this chat template: {exc}. Leave it "
            "out (the policy decides how many calls a turn makes)",
            "parallel_tool_calls",
        ) from None


def _check_grammar(runtime: RolloutRuntime, agent: str, key: GrammarKey) -> None:
    """response_format: the agent's policy samples under a grammar, and compiles this one."""
    policy = runtime.router.route(agent)
    if not isinstance(policy, ConstrainedSampling):
        raise CallRefused(
            f"response_format: this run's policy ({type(policy).__name__}) cannot sample under a JSON "
            "schema's grammar; leave response_format out and ask for the format in the prompt (the "
            "local backend's transformers sampler, rollout.engine: transformers, honours it)",
            "response_format",
        )
    try:
        policy.check_grammar(key)
    except ValueError as exc:
        raise CallRefused(
            f"response_format: {exc}: give a schema it can compile", "response_format"
        ) from None


def forced_opening(runtime: RolloutRuntime, options: CallOptions) -> str:
    """The call text a forced call starts from ("" where the policy decides)."""
    if options.tool_choice not in ("required", "function"):
        return ""
    return runtime.call_control.forced_opening(options.tool_name)


def grammar_key(
    runtime: RolloutRuntime, tools: list[dict[str, Any]] | None, options: CallOptions
) -> GrammarKey | None:
    """The grammar a call's answer is sampled under: its schema, and where the call offers tools the
    policy may call (tool_choice auto), the call opening that starts a call instead."""
    if options.json_schema is None or options.tool_choice in ("required", "function"):
        return None  # a forced call is a call: the schema is for answers
    schema = json.dumps(options.json_schema, sort_keys=True)
    may_call = bool(tools) and options.tool_choice == "auto"
    return schema, runtime.call_control.opening if may_call else None


def first_call_only(runtime: RolloutRuntime, gen: Generation, options: CallOptions) -> Generation:
    """`gen` ended right after its first call's closing text, where the client allows one call per
    turn and the policy went on (to a second call); the tokens kept are the policy's own."""
    if options.parallel_tool_calls or runtime.call_control.first_call_end is None:
        return gen
    end_text = runtime.call_control.first_call_end
    tokenizer = runtime.renderer.tokenizer
    ids = gen.token_ids
    if ids and gen.finish_reason == "stop" and ids[-1] in runtime.stop_token_ids:
        ids = ids[:-1]
    text = tokenizer.decode(ids, skip_special_tokens=False)
    at = text.find(end_text)
    if at < 0 or not text[at + len(end_text) :].strip():
        return gen  # one call, or none: the turn ends as the policy ended it
    for end in range(1, len(ids) + 1):
        if end_text in tokenizer.decode(ids[:end], skip_special_tokens=False):
            return gen.head(end, "stop")
    return gen  # pragma: no cover (the text holds the end)


def choice_problem(parsed: ParseResult, options: CallOptions) -> str | None:
    """Why a parsed turn breaks the call's tool_choice (it ends the episode malformed), or None."""
    if options.tool_choice == "none" and parsed.calls:
        return f"tool_choice='none', but the turn calls {', '.join(c.name for c in parsed.calls)}"
    if options.tool_choice in ("required", "function") and not parsed.calls and not parsed.errors:
        return f"tool_choice={options.tool_choice!r}, but no call could be read from the turn"
    return None


def unoffered_problem(parsed: ParseResult, tools: list[dict[str, Any]] | None) -> str | None:
    """Why a parsed turn calls a tool the call does not offer (it ends the episode malformed), or None.

    A name the policy invented would otherwise reach the agent as a valid call: one framework
    answers it with an error result (AWorld), another raises (the OpenAI Agents SDK), and the
    episode would end as data the policy learns nothing from; as a malformed call it trains at
    reward 0 where `rollout.train_on_malformed` says so."""
    offered = tool_names(tools)
    invented = [c.name for c in parsed.calls if c.name not in offered]
    if not invented:
        return None
    return (
        f"the turn calls {', '.join(repr(name) for name in invented)}, not among the call's tools "
        f"({', '.join(offered) or 'none offered'})"
    )
