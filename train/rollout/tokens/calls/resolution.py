"""Which parser reads a run's tool calls, checked against the chat template's own rendering.

`rollout.tool_parser: auto` takes the parser of the template's family where it reads the
template's rendering of probe calls, else the parser derived from the template
(`rollout/tokens/calls/derivation.py`); `template` takes the derived one; a parser's name takes that
parser. Whichever it is must read the template's own calls back: a format no parser reads is a
`problem`, and the run is refused before any model loads with the template's rendering of a probe
call and the fix. At run time a turn that writes the template's call marker but parses to no call
is malformed, never an answer (`CallFormat.parse`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aworld_train.rollout.tokens.calls.derivation import NotAFrame, derive_frame, turn_body
from aworld_train.rollout.tokens.calls.literals import find_literal
from aworld_train.rollout.tokens.calls.markers import call_lead, call_markers
from aworld_train.rollout.tokens.calls.parsers.base import ParseResult, ToolParser
from aworld_train.rollout.tokens.calls.parsers.template import TemplateParser
from aworld_train.rollout.tokens.calls.probes import (
    ANSWER,
    CONTENT,
    NAMES,
    ONE,
    SECOND,
    TYPED,
    CallIds,
    Render,
    call_message,
    probe_tools,
)
from aworld_train.rollout.tokens.calls.registry import AUTO, TEMPLATE, get_parser, parser_names


@dataclass(frozen=True)
class CallFormat:
    """The parser a run reads tool calls with, how it was chosen, and the template's call markers."""

    parser: ToolParser | None
    how: str  # auto | template | rollout.tool_parser
    markers: tuple[str, ...] = ()
    problem: str | None = None  # why no parser reads the template's calls; the run is refused
    example: str = field(default="", compare=False)  # the template's rendering of a probe call turn

    @property
    def name(self) -> str:
        return self.parser.name if self.parser is not None else "none"

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParseResult:
        """The calls in a turn; a turn holding the template's call marker that reads as no call is
        an error, so that a call is never taken for an answer."""
        if self.parser is None:
            raise ValueError(self.problem or "no tool-call parser")
        result = self.parser.parse(text, tools)
        if not result.calls and not result.errors:
            marker = next((m for m in self.markers if find_literal(text, m) is not None), None)
            if marker is not None:
                result.errors.append(
                    f"the turn writes the template's tool-call marker {marker!r} but no call could be "
                    f"read from it: {text[:300]!r}"
                )
        return result


def resolve(render: Render, call_ids: CallIds, family_parser: str, setting: str) -> CallFormat:
    """The call format of `setting` (auto, template, or a parser's name) for the template behind
    `render`; `family_parser` is the registry's parser for its family ("" where none)."""
    try:
        example = render(call_message([(NAMES[0], call_ids(NAMES[0], 0), ONE)]))
    except Exception as exc:  # the template cannot write a call: only the family's own text can
        example = f"<the template cannot render a tool call: {type(exc).__name__}: {exc}>"
    markers = _markers(render, call_ids)
    derived: TemplateParser | None = None
    why_not = ""
    if setting in (AUTO, TEMPLATE):
        try:
            frame = derive_frame(render, call_ids)
            derived = TemplateParser(frame)
            markers = frame.markers or markers
        except NotAFrame as exc:
            why_not = str(exc)
    if setting == TEMPLATE:
        if derived is not None:
            return CallFormat(derived, TEMPLATE, markers, example=example)
        return CallFormat(
            None, TEMPLATE, markers, _problem(example, f"the derived parser: {why_not}"), example
        )
    if setting != AUTO:
        parser = get_parser(setting)
        miss = _misreads(parser, render, call_ids)
        problem = _problem(example, f"rollout.tool_parser={setting}: {miss}") if miss else None
        return CallFormat(parser, "rollout.tool_parser", markers, problem, example)
    tried = []
    if family_parser:
        parser = get_parser(family_parser)
        miss = _misreads(parser, render, call_ids)
        if miss is None:
            return CallFormat(parser, AUTO, markers, example=example)
        tried.append(f"the family's parser {family_parser}: {miss}")
    if derived is not None:
        return CallFormat(derived, AUTO, markers, example=example)
    tried.append(f"the derived parser: {why_not}")
    return CallFormat(None, AUTO, markers, _problem(example, "; ".join(tried)), example)


def _problem(example: str, tried: str) -> str:
    return (
        f"no tool-call parser reads this chat template's calls; it writes a call as {example!r} "
        f"({tried}). Fix: set rollout.tool_parser to a parser that reads this format ({', '.join(parser_names())}; "
        "template: the one derived from the chat template), or give the model folder a chat template "
        "whose calls one of them reads (chat_template.jinja)"
    )


def _misreads(parser: ToolParser, render: Render, call_ids: CallIds) -> str | None:
    """Why `parser` does not read the template's own probe calls back (None: it reads them)."""
    ids = (call_ids(NAMES[0], 0), call_ids(NAMES[1], 1))
    probes = [[(NAMES[0], ids[0], TYPED)], [(NAMES[0], ids[0], ONE), (NAMES[1], ids[1], SECOND)]]
    tools = probe_tools()
    try:
        answer = render({"role": "assistant", "content": ANSWER})
    except Exception as exc:
        return f"the template cannot render an answer turn ({type(exc).__name__}: {exc})"
    read = 0
    for calls in probes:
        try:
            text = render(call_message(calls))
        except Exception:  # a template may take one call per turn
            continue
        if any(name not in text and call_id not in text for name, call_id, _ in calls):
            continue  # or write only one of them (gpt-oss)
        read += 1
        text = turn_body(text, answer)  # as sampled: without the turn end the policy stopped at
        result = parser.parse(text, tools)
        got = [(c.name, c.arguments) for c in result.calls]
        if result.errors or got != [(n, a) for n, _, a in calls]:
            return f"it reads {got or 'no call'} from {text!r}" + (
                f" ({result.errors[0]})" if result.errors else ""
            )
    if not read:
        return "the template writes none of the probe calls"
    if parser.parse(turn_body(answer, answer), tools).calls:
        return f"it reads a call in an answer {answer!r}"
    return None


def _markers(render: Render, call_ids: CallIds) -> tuple[str, ...]:
    """The template's call markers from its renderings, whatever parser reads them."""
    call_id = call_ids(NAMES[0], 0)
    try:
        answer = render({"role": "assistant", "content": ANSWER})
        one = render(call_message([(NAMES[0], call_id, ONE)]))
    except Exception:
        return ()
    try:
        with_content = render(call_message([(NAMES[0], call_id, ONE)], CONTENT))
    except Exception:
        with_content = None
    start = _first_hole(one, call_id)
    if start < 0:
        return ()
    content_start = _first_hole(with_content, call_id) if with_content else None
    return call_markers([answer], call_lead(answer, one, start, with_content, content_start=content_start))


def _first_hole(text: str, call_id: str) -> int:
    found = [at for at in (text.find(NAMES[0]), text.find(call_id)) if at >= 0]
    return min(found, default=-1)
