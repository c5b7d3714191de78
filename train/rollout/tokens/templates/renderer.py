"""Chat-template rendering for the ledger: whole prompts, and the template text that
follows an assistant turn (the "delta") without re-rendering what came before.

The delta is rendered after a stand-in of the conversation (its messages with stand-in
text, the tool calls kept) and cut right after the last assistant turn, so it never
depends on how the template renders earlier turns (Qwen3 strips old `<think>` blocks and
adds an empty one to the last assistant turn, Llama 3 puts a date and the tools into early
turns, Mistral moves the system prompt to the last user turn), while templates that number
tool calls across the conversation (Kimi-K2) or name a tool result after its call (gpt-oss)
still see them. The ids already in the ledger, including every token the policy sampled,
are never re-tokenised.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from aworld_train.rollout.tokens.calls.probes import probe_tools
from aworld_train.rollout.tokens.calls.registry import (
    AUTO,
    TEMPLATE,
    ParsedCall,
    ToolParser,
    get_parser,
    parser_names,
)
from aworld_train.rollout.tokens.calls.resolution import CallFormat, resolve
from aworld_train.rollout.tokens.calls.tool_block import example_call, example_call_text, tool_block
from aworld_train.rollout.tokens.templates.deltas import cut_after_turn, shows, stand_in_history
from aworld_train.rollout.tokens.templates.families import detect_family
from aworld_train.rollout.tokens.templates.messages import (
    Message,
    call_names,
    content_text,
    dict_arguments,
    named_results,
    with_dict_arguments,
)
from aworld_train.rollout.tokens.templates.template_probes import PROBE_TOOL, TemplateProbes

_FORMATS: dict[tuple, CallFormat] = {}  # call formats by template (derived once per process)
_RESOLVING = CallFormat(None, AUTO)  # while a renderer resolves its own


class ToolResultsLost(ValueError):
    """A tool result did not reach the next prompt: the template dropped it."""


class ChatRenderer(TemplateProbes):
    """Renders messages to ids with a tokenizer's chat template, fitted to its family.

    Probed once by rendering: a template that ignores `tools=` gets our tool block in the system
    turn (`tool_block: auto`); one that does not write assistant tool calls gets them as the
    family's call text; with the hermes tool block, tool results are wrapped in
    `<tool_response>` tags; a template without a system role gets the system prompt at the start
    of the first user turn. A tool message gets the tool's name from its call where it lacks one
    (some templates render a result only with it). `tool_results_problem` says why a template
    cannot carry tool results (it drops or refuses them), or is None; with
    `tool_results_as_user` they are written as user turns instead. `calls` is the call format
    of `tool_parser` (`rollout/tokens/calls/resolution.py`), resolved once per template.
    """

    def __init__(
        self,
        tokenizer,
        chat_template: str | None = None,
        tool_block: str = "auto",
        template_kwargs: dict[str, Any] | None = None,
        tool_parser: str = AUTO,
        tool_results_as_user: bool = False,
    ) -> None:
        if tool_block not in ("auto", "never"):
            raise ValueError(f"tool_block must be 'auto' or 'never', not {tool_block!r}")
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        # extra template variables, e.g. {"enable_thinking": False} for Qwen3
        self.template_kwargs = dict(template_kwargs or {})
        self.tool_parser = tool_parser
        self.tool_results_as_user = tool_results_as_user
        self.family = detect_family(self.template_text)
        self._calls: CallFormat | None = None
        self._writing: ToolParser | None = None  # while a named parser's format is resolved
        self._formats: dict[str, CallFormat] = {}  # by rollout.tool_parser setting
        # what the probes below assume while they run
        self.system_role, self.renders_calls, self.add_tool_block, self.wrap_results = (
            True,
            True,
            False,
            False,
        )
        self.system_role = self._probe_system_role()
        self._probe_tools = [PROBE_TOOL]
        self.supports_tools = self._detect_tool_support()
        self.renders_calls = self._probe_renders_calls()
        # 'never': the agent's own prompt (e.g. few-shot turns) shows the tools instead
        self.add_tool_block = tool_block == "auto" and not self.supports_tools
        # our hermes tool block tells the model results come in <tool_response> tags
        self.wrap_results = not self.supports_tools and self.family.tool_prompt == "hermes"
        self.tool_results_problem = self._probe_tool_results()

    @property
    def template_text(self) -> str:
        template = self.chat_template or getattr(self.tokenizer, "chat_template", None)
        return template if isinstance(template, str) else ""

    @property
    def calls(self) -> CallFormat:
        """How the run reads the policy's tool calls (its parser, markers, or why none reads them)."""
        if self._calls is None:
            self._calls = self.call_format(self.tool_parser)
        return self._calls

    def call_format(self, setting: str) -> CallFormat:
        """The call format of a `rollout.tool_parser` setting for this template (cached)."""
        if self._calls is _RESOLVING:
            return _RESOLVING
        if setting not in self._formats:
            key = (*self._format_key(), setting)
            if key not in _FORMATS:
                _FORMATS[key] = self._resolve_calls(setting)
            self._formats[setting] = _FORMATS[key]
        return self._formats[setting]

    @property
    def parser(self) -> str:
        """The name of the parser that reads the policy's tool calls (`template`: derived)."""
        return self.calls.name

    def _format_key(self) -> tuple:
        special = tuple(sorted(str(t) for t in getattr(self.tokenizer, "all_special_tokens", [])))
        return (
            self.template_text,
            json.dumps(self.template_kwargs, sort_keys=True, default=str),
            self.add_tool_block,
            self.tool_results_as_user,
            type(self.tokenizer).__name__,
            special,
        )

    def _resolve_calls(self, setting: str) -> CallFormat:
        history = [{"role": "user", "content": "zqhi"}]
        tools = probe_tools()
        held, self._calls = self._calls, _RESOLVING  # the probes render with the family's tool block
        # a named parser's own format is what history shows where the template writes no calls
        self._writing = None if setting in (AUTO, TEMPLATE) else get_parser(setting)
        try:
            calls = resolve(
                lambda message: self.turn_text(history, message, tools),
                self._probe_call_id,
                # the family's parser; where the template writes no calls, the format in the prompt is ours
                self.family.parser if self.family.markers or not self.renders_calls else "",
                setting,
            )
        finally:
            self._calls, self._writing = held, None
        problem = calls.problem or self._taught_format_problem(calls, setting)
        return replace(calls, problem=problem) if problem != calls.problem else calls

    def _taught_format_problem(self, calls: CallFormat, setting: str) -> str | None:
        """Why the run's parser would not read the calls the model is taught to write, or None.

        A template that shows the tools but writes no assistant call leaves the format to the model:
        only a family whose format is known here says which. Where our tool block shows the format,
        the parser must read the block's own example call."""
        if setting == AUTO and self.supports_tools and not self.renders_calls and not self.family.markers:
            return (
                "the chat template lists the tools but writes no assistant tool call, so the format its "
                "model calls in is not known here (reading it as hermes would take every call for an "
                "answer). Fix: set rollout.tool_parser to the model's own format "
                f"({', '.join(parser_names())}), or give the model folder a chat template that writes calls"
            )
        if not self.add_tool_block or calls.parser is None:
            return None
        call = example_call(probe_tools())
        shown = example_call_text(call, self.family.tool_prompt, self._block_writer(calls))
        read = calls.parser.parse(shown, probe_tools())
        if [(c.name, c.arguments) for c in read.calls] != [(call.name, call.arguments)]:
            return (
                f"our tool block shows a call as {shown!r}, which the parser {calls.name} does not read back "
                f"({[(c.name, c.arguments) for c in read.calls] or read.errors or 'no call'}). Fix: set "
                "rollout.tool_parser to the format the block shows, or rollout.tool_block: never with "
                "few-shot turns in the model's own format"
            )
        return None

    def _block_writer(self, calls: CallFormat):
        """What writes the tool block's example call: the run's parser, so that the block teaches
        the format it reads; None where that is the block's own style (hermes tags, DeepSeek's tokens)."""
        own_style = "deepseek" if self.family.tool_prompt == "deepseek" else "hermes"
        return None if calls.parser is None or calls.name == own_style else calls.parser

    def _probe_call_id(self, name: str, index: int) -> str:
        """A probe call's id, in the form the family's template accepts (9 alphanumerics where it
        does not say)."""
        if self.family.call_ids == "plain":
            return f"zqcall{index:03d}"
        return self.family.call_id(ParsedCall(name, {}), 0, index, set(range(index)))

    # -- template probing -------------------------------------------------
    def _apply(self, messages: list[Message], tools=None, add_generation_prompt=False) -> str:
        return self.tokenizer.apply_chat_template(
            messages,
            tools=tools,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            chat_template=self.chat_template,
            **self.template_kwargs,
        )

    def turn_text(
        self, history: list[Message], message: Message, tools: list[dict[str, Any]] | None = None
    ) -> str:
        """The text the model writes for assistant `message` after `history`'s generation prompt,
        as the template renders that turn in history (its closing text included).

        A template may render the last message before the turn differently once a turn follows it
        (Hermes' last tool result), or open in the generation prompt what it leaves out of history
        (an empty think block): the model then closes it and writes the turn as history shows it.
        """
        shown = tools if self.supports_tools else None
        prompt = self._apply(self._prepare(history, tools), tools=shown, add_generation_prompt=True)
        full = self._apply(self._prepare([*history, message], tools), tools=shown)
        if full.startswith(prompt):
            return full[len(prompt) :]
        at = 0
        while at < min(len(prompt), len(full)) and prompt[at] == full[at]:
            at += 1
        base = self._apply(self._prepare(history, tools), tools=shown)
        opener = prompt[len(base) :] if prompt.startswith(base) else ""
        if opener and full.rfind(opener) >= at - len(opener):
            return full[full.rindex(opener) + len(opener) :]
        while at and full[at - 1] not in "\n>":
            at -= 1
        opened, rest = prompt[at:], full[at:]
        if "<think>" in opened and "</think>" not in opened and not rest.startswith("</think>"):
            thought = message.get("reasoning_content") or ""
            return (thought + "\n" if thought else "") + "</think>\n\n" + rest
        return rest

    # -- message preparation ----------------------------------------------
    def call_text(self, calls: list[dict[str, Any]]) -> str:
        """Assistant tool calls as the model writes them, for templates that do not render them: in
        the format the run reads (the family's while that is being resolved)."""
        parsed = [
            ParsedCall(c["function"]["name"], dict_arguments(c["function"].get("arguments")), c.get("id"))
            for c in calls
        ]
        writer = self.calls.parser or self._writing or get_parser(self.family.parser)
        return writer.format("", parsed)

    def _prepare(self, messages: list[Message], tools: list[dict] | None = None) -> list[Message]:
        out: list[Message] = []
        names = call_names(messages)
        for msg in messages:
            role = msg.get("role")
            item: Message = {"role": role, "content": content_text(msg.get("content"))}
            if role == "assistant" and msg.get("tool_calls"):
                calls = msg["tool_calls"]
                if self.renders_calls:
                    item["tool_calls"] = [with_dict_arguments(c) for c in calls]
                else:
                    text = self.call_text(calls)
                    item["content"] = (item["content"] + "\n" if item["content"] else "") + text
            if role == "tool":
                if msg.get("tool_call_id"):
                    item["tool_call_id"] = msg["tool_call_id"]
                name = msg.get("name") or names.get(msg.get("tool_call_id"))
                if name:
                    item["name"] = name
                if self.wrap_results or self.tool_results_as_user:
                    item["content"] = f"<tool_response>\n{item['content']}\n</tool_response>"
                if self.tool_results_as_user:
                    # the template has no tool role (Phi-3.5, Gemma-2): results are what the user says next
                    if out and out[-1].get("from_tools"):
                        out[-1]["content"] += "\n" + item["content"]
                        continue
                    item = {"role": "user", "content": item["content"], "from_tools": True}
            out.append(item)
        out = [{k: v for k, v in m.items() if k != "from_tools"} for m in out]
        if tools and self.add_tool_block:
            calls = self.calls
            # a template that writes calls in a format of its own is shown a call in that format
            block = tool_block(tools, self.family.tool_prompt, self._block_writer(calls))
            if out and out[0]["role"] == "system":
                out[0] = {**out[0], "content": out[0]["content"] + block}
            else:
                out.insert(0, {"role": "system", "content": block.lstrip()})
        if not self.system_role and out and out[0]["role"] == "system":
            # no system role in the template (Gemma-2): the system prompt opens the first user turn
            system = out.pop(0)["content"]
            if out and out[0]["role"] == "user":
                out[0] = {**out[0], "content": system + "\n\n" + out[0]["content"]}
            else:
                out.insert(0, {"role": "user", "content": system})
        return out

    def _eos(self) -> str:
        eos = getattr(self.tokenizer, "eos_token", None)
        return eos if isinstance(eos, str) else ""

    # -- rendering ----------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def render_prompt(
        self, messages: list[Message], tools: list[dict] | None, few_shot: list[Message] | None = None
    ) -> list[int]:
        """A whole conversation, ending with the generation prompt: the start of a segment.

        `few_shot` example turns go right after the system message; they are prompt, never loss.
        """
        if few_shot:
            at = 1 if messages and messages[0].get("role") == "system" else 0
            messages = [*messages[:at], *few_shot, *messages[at:]]
        prepared = self._prepare(messages, tools)
        text = self._apply(prepared, tools=tools if self.supports_tools else None, add_generation_prompt=True)
        return self.encode(text)

    def render_delta(
        self,
        history: list[Message],
        new_messages: list[Message],
        tools: list[dict] | None = None,
        stop_text: str = "",
    ) -> list[int]:
        """Ids that follow a sampled assistant turn (the last of `history`): the rest of its
        closing text, the new messages, and the generation prompt. `stop_text`: the token the
        policy ended the turn with, if it did (it is not written twice)."""
        text = self.delta_text(history, new_messages, tools, stop_text)
        for message in new_messages:
            if message.get("role") == "tool" and not shows(text, content_text(message.get("content"))):
                raise ToolResultsLost(
                    f"the tool result for call {message.get('tool_call_id')!r} is not in the next prompt: "
                    f"{self.tool_results_problem or 'the chat template dropped it'}"
                )
        return self.encode(text)

    def delta_text(
        self,
        history: list[Message],
        new_messages: list[Message],
        tools: list[dict] | None = None,
        stop_text: str = "",
    ) -> str:
        """The template's text from the end of the last assistant turn of `history` to the next
        generation prompt, with `new_messages` in between.

        Rendered after a stand-in of `history` and cut right after its last assistant turn:
        whatever the template does to earlier turns (strip or add think blocks, a date, the
        tools) happens before the cut and is not in the delta. Where the turn ended with a stop
        token, the stand-in keeps the turn's tool calls and the cut is after that token (a
        template may render a tool result only after its call); otherwise the cut is after the
        turn's content and the delta starts with the template's closing text.
        """
        tools = tools if self.supports_tools else None
        new_messages = named_results(new_messages, history)
        calls = bool(history and history[-1].get("tool_calls"))
        systems = (True, False) if any(m.get("role") == "system" for m in history) else (False,)
        reasons = []
        closers = (stop_text, *self.family.closers, self._eos())
        for keep_system in systems:
            for with_calls in (True, False) if calls and stop_text else (False,):
                stand_in = stand_in_history(history, keep_system, with_calls)
                try:
                    text = self._apply(
                        self._prepare(stand_in + new_messages), tools=tools, add_generation_prompt=True
                    )
                except Exception as exc:  # a template may refuse one stand-in (e.g. a call-less result)
                    reasons.append(f"{type(exc).__name__}: {exc}")
                    continue
                tail, reason = cut_after_turn(text, new_messages, stop_text, with_calls, closers)
                if tail is None:
                    reasons.append(reason)
                    continue
                return tail
        raise ValueError(
            "cannot render new messages after an assistant turn with this chat template "
            f"({'; '.join(reasons)}); set rollout.chat_template_kwargs or use a template that "
            "renders each turn once"
        )


def renderer_for(tokenizer, rollout) -> ChatRenderer:
    """The renderer of a run's `rollout:` settings (tool block, template variables, tool parser,
    tool results as user turns)."""
    return ChatRenderer(
        tokenizer,
        tool_block=rollout.tool_block,
        template_kwargs=rollout.chat_template_kwargs,
        tool_parser=rollout.tool_parser,
        tool_results_as_user=rollout.tool_results_as_user,
    )
