"""Learn a chat template's tool-call frame (`rollout/tokens/calls/frame.py`) from its own renderings.

The template is asked to render assistant turns made of sentinels: one call, two parallel calls,
typed arguments (string, number, object, list, boolean), content beside the calls, and, where the
family thinks, reasoning. Where each sentinel lands gives the frame: the text around the block and
around each call, where the name, the id and each argument go, whether the arguments are one
object (in which syntax) or XML-like parameters, how values of each kind are written, whether a
call's index is written. The frame is then checked against every probe: it must read back exactly
the calls each rendering holds, else the template's format is not a fixed frame and no parser is
derived (`NotAFrame` says why). Nothing here reaches the network; a renderer derives once.
"""

from __future__ import annotations

from typing import Any

from aworld_train.rollout.tokens.calls.frame import CallFrame, Hole, Params, Piece, read_params, value_kind
from aworld_train.rollout.tokens.calls.frame_check import NotAFrame, check_frame
from aworld_train.rollout.tokens.calls.literals import (
    after_tag,
    before_tag,
    common_prefix,
    common_suffix,
    inside_tag,
)
from aworld_train.rollout.tokens.calls.markers import call_lead, call_markers, with_call_marker
from aworld_train.rollout.tokens.calls.probes import (
    ANSWER,
    CONTENT,
    NAMES,
    ONE,
    SCHEMA_TYPES,
    SECOND,
    THOUGHT,
    TYPED,
    CallIds,
    Render,
    call_message,
)
from aworld_train.rollout.tokens.calls.values import JSON, PYTHON, ValueSyntax, find_value


def derive_frame(render: Render, call_ids: CallIds) -> CallFrame:
    """The frame of the template behind `render`; NotAFrame where there is none."""
    ids = (call_ids(NAMES[0], 0), call_ids(NAMES[1], 1))
    one = [(NAMES[0], ids[0], ONE)]
    two = [*one, (NAMES[1], ids[1], SECOND)]
    typed = [(NAMES[0], ids[0], TYPED)]
    try:
        answer = render({"role": "assistant", "content": ANSWER})
        t_one = render(call_message(one))
        t_typed = render(call_message(typed))
    except Exception as exc:
        raise NotAFrame(f"the template cannot render a tool call ({type(exc).__name__}: {exc})") from None
    t_two = _maybe(render, call_message(two), NAMES[1])
    t_content = _maybe(render, call_message(one, CONTENT), CONTENT)
    if t_content is not None and NAMES[0] not in t_content and ids[0] not in t_content:
        t_content = None  # the template drops the calls of a turn with content
    if NAMES[0] not in t_one and ids[0] not in t_one:
        raise NotAFrame("the template writes neither the tool's name nor the call's id")
    args = _learn_args(t_typed, ids[0])
    calls_one = _holes(t_one, NAMES[0], ids[0], ONE, form=args)
    start, end = calls_one[0][0], calls_one[-1][1]
    content_start = _holes(t_content, NAMES[0], ids[0], ONE, form=args)[0][0] if t_content else None
    lead = call_lead(answer, t_one, start, t_content, content_start=content_start)
    tail = turn_body(t_one[end:], answer)
    if t_two is None:  # one call per turn: the whole opening and closing belong to the call
        block_open, block_close, sep, bases = "", "", "", []
        pieces = tuple(_merge([lead, *_inner(t_one, calls_one), tail]))
    else:
        calls_two = _holes(t_two, NAMES[0], ids[0], ONE, form=args) + _holes(
            t_two, NAMES[1], ids[1], SECOND, form=args
        )
        block_open, pieces, sep, block_close, bases = _split(t_two, calls_two, len(calls_one), lead, tail)
    if not block_open.strip() and not (isinstance(pieces[0], str) and pieces[0].strip()):
        raise NotAFrame(f"no text marks where a call starts (it opens with its {pieces[0].what})")
    content_after, content_sep = _content_place(t_content, ids[0], args, lead)
    if t_content is not None and not content_after:
        _same_content_frame(t_content, answer)
    frame = CallFrame(
        block_open=block_open,
        pieces=pieces,
        sep=sep,
        block_close=block_close,
        args=args,
        content_after=content_after,
        content_sep=content_sep,
        index_base=min(bases, default=0),
        id_name=_id_name(t_one, ids[0]),
        markers=with_call_marker(call_markers([answer], lead), pieces, answer),
    )
    probes = [(t_one, one, ""), (t_typed, typed, "")]
    if t_two is not None:
        probes.append((t_two, two, ""))
    if t_content is not None:
        probes.append((t_content, one, CONTENT))
    t_think = _maybe(render, call_message(one, "", THOUGHT), THOUGHT)  # where the template shows reasoning
    if t_think is not None and NAMES[0] in t_think:
        probes.append((t_think, one, None))
    check_frame(frame, probes, answer)
    return frame


def _split(text: str, calls: list[Span], per_call: int, lead: str, tail: str):
    """The block's and each call's own text, from two calls in `text`: a call opens with what the
    text before the first call (`lead`) and the text between the two calls end with alike, and
    closes with what the text after the last (`tail`) and the text between begin with alike;
    digits that are one more in the second call are its index. Returns (block_open, a call's
    pieces, the separator between calls, block_close, the first call's index digits)."""
    first, second = calls[:per_call], calls[per_call:]
    if [h[2] for h in second] != [h[2] for h in first] or first[-1][1] > second[0][0]:
        raise NotAFrame(f"two calls are not written one after the other in the same form: {text!r}")
    between = text[first[-1][1] : second[0][0]]
    bases: list[int] = []
    inner = _indexed(_inner(text, first), _inner(text, second), bases)
    open_len, open_digits = _common_end(lead, between, backwards=True)
    open_len = len(lead) - after_tag(lead, len(lead) - open_len)
    close_len, close_digits = _common_end(tail, between[: len(between) - open_len], backwards=False)
    close_len = before_tag(tail, close_len)
    shift = len(lead) - open_len
    call_open = _with_index(lead[shift:], [d - shift for d in open_digits], bases)
    call_close = _with_index(tail[:close_len], close_digits, bases)
    pieces = tuple(_merge([*call_open, *inner, *call_close]))
    return lead[:shift], pieces, between[close_len : len(between) - open_len], tail[close_len:], bases


# -- the arguments ---------------------------------------------------------------------------


def _learn_args(text: str, call_id: str) -> ValueSyntax | Params:
    found = find_value(text, TYPED, 0, len(text))
    if found is not None:
        return found[0]
    return _learn_params(text, TYPED, _before_params(text, call_id))


def _before_params(text: str, call_id: str) -> int:
    """Where the parameters may start: after the tool's name (or the call's id)."""
    at = text.find(NAMES[0])
    if at >= 0:
        return at + len(NAMES[0])
    at = text.find(call_id)
    return at + len(call_id) if at >= 0 else 0


def _learn_params(text: str, args: dict[str, Any], lo: int) -> Params:
    positions = {}
    for key in args:
        at = text.find(key, lo)
        if at < 0 or text.find(key, at + 1) >= 0:
            raise NotAFrame(f"a parameter's name is not written once in {text[lo:]!r}")
        positions[key] = at
    order = sorted(args, key=positions.__getitem__)
    gaps = [text[positions[a] + len(a) : positions[b]] for a, b in zip(order, order[1:], strict=False)]
    lead = text[lo : positions[order[0]]]
    open_ = common_suffix([*gaps, lead])
    open_ = open_[after_tag(open_, 0) if inside_tag(open_, 0) < 0 else 0 :]
    cut = after_tag(gaps[0], len(gaps[0]) - len(open_)) if gaps else len(lead) - len(open_)
    open_ = (gaps[0] if gaps else lead)[cut:]
    rests = [g[: len(g) - len(open_)] for g in gaps] + [text[positions[order[-1]] + len(order[-1]) :]]
    mids: dict[str, str] = {}
    encoders: dict[str, ValueSyntax] = {}
    afters = []
    bare_strings = True
    for key, rest in zip(order, rests, strict=True):
        value = args[key]
        kind = value_kind(value)
        syntax, start, end = _value_in(rest, value)
        if kind == "string" and syntax is not None:
            bare_strings = False
        mids[kind] = rest[:start]
        afters.append(rest[end:])
        encoders[kind] = syntax or JSON
    terminator = common_prefix(afters[:-1])
    terminator = terminator[: before_tag(afters[0], len(terminator))] if len(afters) > 1 else terminator
    delimited = bool(terminator.strip()) and afters[-1].startswith(terminator) and bare_strings
    if not delimited and bare_strings:
        raise NotAFrame(f"parameter values are neither closed by a tag nor quoted: {text[lo:]!r}")
    if len(set(mids.values())) == 1:
        mids = {"any": next(iter(mids.values()))}
    return Params(
        open=open_,
        mids=tuple(mids.items()),
        close=terminator if delimited else "",
        sep="" if delimited else terminator,
        encoders=tuple(encoders.items()),
        bare_strings=bare_strings,
        sort_keys=order == sorted(args) and order != list(args),
    )


def _value_in(rest: str, value: Any) -> tuple[ValueSyntax | None, int, int]:
    """How `value` is written in `rest` (the text after its key): its syntax (None: a bare string)
    and span."""
    if isinstance(value, str):
        at = rest.find(value)
        if at < 0:
            raise NotAFrame(f"a string value is not written as such: {rest!r}")
        quote = rest[at - 1] if at > 0 else ""
        if quote in ("'", '"') and rest[at + len(value) : at + len(value) + 1] == quote:
            return (PYTHON if quote == "'" else JSON), at - 1, at + len(value) + 1
        return None, at, at + len(value)
    found = []
    for syntax in (JSON, ValueSyntax("json", separators=(",", ":")), PYTHON):
        at = rest.find(syntax.encode(value))
        if at >= 0:
            found.append((at, syntax))
    if not found:
        raise NotAFrame(f"a {value_kind(value)} value is written neither as JSON nor as Python: {rest!r}")
    at, syntax = min(found, key=lambda f: f[0])
    return syntax, at, at + len(syntax.encode(value))


# -- where the calls are ---------------------------------------------------------------------

Span = tuple[int, int, str]  # start, end, hole kind


def _holes(
    text: str, name: str, call_id: str, args: dict[str, Any], *, form: ValueSyntax | Params
) -> list[Span]:
    """The spans of one call's holes in `text`, in order."""
    spans: list[Span] = []
    ids = _occurrences(text, call_id)
    spans += [(a, b, "id") for a, b in ids]
    spans += [(a, b, "name") for a, b in _occurrences(text, name) if not any(i <= a < j for i, j in ids)]
    args_span = _args_span(text, args, form)
    if args_span is None:
        raise NotAFrame(f"the arguments {args} are not read back from {text!r}")
    spans.append((*args_span, "args"))
    spans.sort()
    for (_, end, _), (start, _, _) in zip(spans, spans[1:], strict=False):
        if start < end:
            raise NotAFrame(f"a call's parts overlap in {text!r}")
    return spans


def _args_span(text: str, args: dict[str, Any], form: ValueSyntax | Params) -> tuple[int, int] | None:
    if isinstance(form, ValueSyntax):
        at = text.find("{")
        while at >= 0:
            try:
                value, end = form.read(text, at)
            except ValueError:
                value, end = None, at
            if value == args:
                return at, end
            at = text.find("{", at + 1)
        return None
    first = min((text.find(k) for k in args if text.find(k) >= 0), default=-1)
    if first < 0:
        return None
    opening = form.open.strip()
    start = text.rfind(opening, 0, first) if opening else first
    if start < 0 or text[start + len(opening) : first].strip():
        return None
    types = {k: SCHEMA_TYPES[value_kind(v)] for k, v in args.items()}
    try:
        value, end = read_params(form, text, start, types)
    except ValueError:
        return None
    return (start, end) if value == args else None


def _occurrences(text: str, word: str) -> list[tuple[int, int]]:
    out, at = [], text.find(word)
    while at >= 0:
        out.append((at, at + len(word)))
        at = text.find(word, at + 1)
    return out


def _inner(text: str, spans: list[Span]) -> list[Piece]:
    """A call from its first hole to its last: holes and the text between them."""
    out: list[Piece] = []
    for i, (start, _, kind) in enumerate(spans):
        if i:
            out.append(text[spans[i - 1][1] : start])
        out.append(Hole(kind))  # type: ignore[arg-type]
    return out


def _indexed(first: list[Piece], second: list[Piece], bases: list[int]) -> list[Piece]:
    """Call 1's pieces with an index hole wherever call 2's text differs from it by the next
    number (the number call 1 has goes to `bases`)."""
    out: list[Piece] = []
    for a, b in zip(first, second, strict=True):
        if a == b or not isinstance(a, str) or not isinstance(b, str):
            out.append(a)
            continue
        length, digits = _common_end(a, b, backwards=False)
        if length != len(a) or len(a) != len(b) or not digits:
            raise NotAFrame(f"two calls differ beyond their names, ids and arguments: {a!r} / {b!r}")
        out.extend(_with_index(a, digits, bases))
    return out


def _common_end(a: str, b: str, backwards: bool) -> tuple[int, list[int]]:
    """The length of the common start (or end) of `a` and `b`, where a digit of `a` may stand
    for the next digit in `b` (a call's index); and the positions in `a` of those digits."""
    n, digits = 0, []
    while n < len(a) and n < len(b):
        i, j = (len(a) - 1 - n, len(b) - 1 - n) if backwards else (n, n)
        if a[i] != b[j]:
            if not (a[i].isdigit() and b[j].isdigit() and int(b[j]) == int(a[i]) + 1):
                break
            digits.append(i)
        n += 1
    return n, sorted(digits)


def _with_index(text: str, digits: list[int], bases: list[int]) -> list[Piece]:
    """`text` with the digits at `digits` (a call's index) made holes."""
    out: list[Piece] = []
    at = 0
    for d in digits:
        out += [text[at:d], Hole("index")]
        bases.append(int(text[d]))
        at = d + 1
    out.append(text[at:])
    return [p for p in out if p != ""]


def _merge(pieces: list[Piece]) -> list[Piece]:
    out: list[Piece] = []
    for piece in pieces:
        if isinstance(piece, str) and out and isinstance(out[-1], str):
            out[-1] += piece
        elif piece != "":
            out.append(piece)
    return out


def turn_body(turn: str, answer: str) -> str:
    """A rendered turn without the closing text it shares with an answer turn (its end of turn):
    what a policy samples before its stop token."""
    if ANSWER not in answer:
        return turn
    after = answer[answer.find(ANSWER) + len(ANSWER) :]
    if turn == answer:
        return turn[: len(turn) - len(after)]
    n = len(common_suffix([turn, after]))
    return turn[: after_tag(turn, len(turn) - n)]


def _same_content_frame(t_content: str, answer: str) -> None:
    """Content beside calls must be written as an answer's content is (else it is another
    message: gpt-oss writes it on its analysis channel and an answer on its final one)."""
    if ANSWER in answer and t_content[: t_content.find(CONTENT)] != answer[: answer.find(ANSWER)]:
        raise NotAFrame(
            "the template writes the text beside a call in another frame than an answer "
            f"({t_content[: t_content.find(CONTENT)]!r} / {answer[: answer.find(ANSWER)]!r}): "
            "the turn's content is not the text around its calls"
        )


def _content_place(
    t_content: str | None, call_id: str, args: ValueSyntax | Params, lead: str
) -> tuple[bool, str]:
    """Whether the template writes the content after the calls, and the whitespace it writes
    between the content and the calls."""
    if t_content is None:
        return False, ""
    at = t_content.find(CONTENT)
    first = _holes(t_content, NAMES[0], call_id, ONE, form=args)[0][0]
    if at > first:
        return True, ""
    between = t_content[at + len(CONTENT) : first]
    if lead and between.endswith(lead) and not between[: len(between) - len(lead)].strip():
        return False, between[: len(between) - len(lead)]
    return False, ""


def _id_name(text: str, call_id: str) -> tuple[str, str] | None:
    """Where the id holds the tool's name (Kimi-K2's `functions.NAME:0`): the text around it."""
    if call_id not in text or NAMES[0] not in call_id:
        return None
    before, _, after = call_id.partition(NAMES[0])
    return before, after.rstrip("0123456789")


# -- small helpers -----------------------------------------------------------------------------


def _maybe(render: Render, message: dict[str, Any], must_hold: str) -> str | None:
    try:
        text = render(message)
    except Exception:  # a template may refuse a probe (one call per turn): that part stays unknown
        return None
    return text if must_hold in text else None
