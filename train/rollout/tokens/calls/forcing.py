"""A client's say over a turn's tool calls (`tool_choice`, `parallel_tool_calls`), met in the chat
template's own call text and never by rewriting what the policy sampled.

- A forced call (`required`, or a named function) opens with the template's call text up to the
  tool's name, or up to the named tool's arguments. That text is added to the prompt of the call:
  the policy samples the rest (the name, the arguments, the closing text), every sampled token with
  its own logprob, and the forced text is never loss (mask 0), as a template's own text is not. The
  trainer then learns what the policy wrote inside the call, not the choice to call, which the
  client made.
- A turn that may hold one call (`parallel_tool_calls: false`) ends right after its first call's
  closing text, as a stop string ends a turn: the tokens kept are the policy's own, the rest were
  never shown to anyone.

Both are read off the template's renderings of probe calls, once per template and setting.
"""

from __future__ import annotations

from dataclasses import dataclass

from aworld_train.rollout.tokens.calls.derivation import turn_body
from aworld_train.rollout.tokens.calls.literals import common_prefix, common_suffix
from aworld_train.rollout.tokens.calls.probes import ANSWER, NAMES, ONE, SECOND, CallIds, Render, call_message

# what opens a call's arguments, trimmed from a forced opening so that the policy writes them whole
# (a forced `{` would also split the tokens it usually writes as one, such as `{"`)
_ARGUMENT_OPENERS = "{[(<\"' \t\n"
# what may close an argument value before a call's own closing text
_VALUE_CLOSERS = "}])>\"' \t\n"
_NUMBER = {"zqks": 7351}


class NotControllable(ValueError):
    """The template's call text does not allow what the client asked (the message says why)."""


@dataclass(frozen=True)
class CallControl:
    """What a template's renderings say about forcing and ending calls: each field holds the
    text, or why there is none (`problems`)."""

    opening: str | None  # a call's text before its tool's name
    named_opening: str | None  # before its arguments, with NAMES[0] where the name goes
    first_call_end: str | None  # the text that closes one call (and only a call)
    problems: dict[str, str]

    def forced_opening(self, tool_name: str | None) -> str:
        """The text a forced call starts from: any tool (None), or `tool_name`'s arguments."""
        if tool_name is None:
            if self.opening is None:
                raise NotControllable(self.problems["opening"])
            return self.opening
        if self.named_opening is None:
            raise NotControllable(self.problems["named_opening"])
        return self.named_opening.replace(NAMES[0], tool_name)

    def call_end(self) -> str:
        if self.first_call_end is None:
            raise NotControllable(self.problems["first_call_end"])
        return self.first_call_end


def read_control(render: Render, call_ids: CallIds) -> CallControl:
    """The call control of the template behind `render` (an assistant message -> its turn text)."""
    problems: dict[str, str] = {}
    ids = (call_ids(NAMES[0], 0), call_ids(NAMES[1], 1))
    try:
        answer = render({"role": "assistant", "content": ANSWER})

        def body(calls) -> str:
            return turn_body(render(call_message(calls)), answer)

        one = body([(NAMES[0], ids[0], ONE)])
        # another name, id and arguments: what stays the same is the template's own text
        other = body([(NAMES[1], ids[1], SECOND)])
        empty = body([(NAMES[0], ids[0], {})])
        number = body([(NAMES[0], ids[0], _NUMBER)])
    except Exception as exc:
        why = f"the chat template cannot render a tool call ({type(exc).__name__}: {exc})"
        return CallControl(
            None, None, None, dict.fromkeys(("opening", "named_opening", "first_call_end"), why)
        )
    return CallControl(
        _opening(one, other, ids[0], problems),
        _named_opening(one, empty, ids[0], problems),
        _first_call_end(body, one, (empty, number), ids, problems),
        problems,
    )


def _opening(one: str, other: str, call_id: str, problems: dict[str, str]) -> str | None:
    """The text before the first thing the policy chooses: the tool's name, or a call id the
    template writes before it."""
    at = min((i for i in (one.find(NAMES[0]), one.find(call_id)) if i >= 0), default=-1)
    if at < 0 or other[:at] != one[:at] or not one[:at].strip():
        problems["opening"] = (
            f"the template writes a call as {one!r}, with no fixed text before the tool's name"
        )
        return None
    return one[:at]


def _named_opening(one: str, empty: str, call_id: str, problems: dict[str, str]) -> str | None:
    """The text through the tool's name, before anything the policy chooses next (a call id of
    its own, the arguments); an id made of the name and the call's index (Kimi-K2's) is kept."""
    head = common_prefix([one, empty]).rstrip(_ARGUMENT_OPENERS)
    at_id = one.find(call_id)
    if 0 <= at_id < len(head) and NAMES[0] not in call_id:
        head = head[:at_id]
    if NAMES[0] not in head:
        problems["named_opening"] = (
            f"the template writes a call as {one!r}: the tool's name does not come first"
        )
        return None
    return head


def _first_call_end(body, one: str, others: tuple[str, ...], ids, problems: dict[str, str]) -> str | None:
    """The text that closes a call, whatever its arguments: where one call of a turn that may hold
    only one ends."""
    try:
        two = body([(NAMES[0], ids[0], ONE), (NAMES[1], ids[1], SECOND)])
    except Exception:
        two = ""
    end = common_suffix([one, *others]).strip().lstrip(_VALUE_CLOSERS)
    if not two.startswith(one.rstrip()) or not end or end in one[: len(one.rstrip()) - len(end)]:
        problems["first_call_end"] = (
            f"the template writes a turn's calls as one whole ({two or one!r}), which cannot end after "
            "its first call"
        )
        return None
    return end
