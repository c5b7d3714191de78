"""A tool-call format as a frame: the literal text a chat template writes around the calls of one
assistant turn, with holes where each call's name, id, index and arguments go.

A turn with calls is `content` then `block_open`, the calls (each `pieces` with its holes filled,
`sep` between them) and `block_close` (or the block first and the content after it, where the
template writes it so). The arguments are one object in a `ValueSyntax` (JSON, Python's repr, a
dialect), or a list of `Params` (`open KEY mid VALUE close`, XML-like). The frame is learned from
the template's renderings (`rollout/tokens/calls/derivation.py`); this module reads sampled text with it
(`parse`) and writes calls the way the template does (`format`).

Whitespace between the frame's literal parts is not binding when reading (a model may drop or add
a newline between two tags), except at the edges of a value written as bare text, where exactly
the template's whitespace is removed. A block whose opening is found but whose calls cannot be
read is an error, never an answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from aworld_train.rollout.tokens.calls.literals import (
    common_prefix,
    cut_short,
    find_literal,
    leading_space,
    literal_chunks,
    match_literal,
    read_until,
    skip_space,
    trailing_space,
    trim,
)
from aworld_train.rollout.tokens.calls.parsers.base import ParsedCall, ParseResult, parameter_types
from aworld_train.rollout.tokens.calls.values import JSON, ValueSyntax

HoleKind = Literal["name", "id", "index", "args"]
ValueKind = Literal["string", "number", "boolean", "object", "array", "null"]


@dataclass(frozen=True)
class Hole:
    what: HoleKind


Piece = str | Hole


def value_kind(value: Any) -> ValueKind:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "null"


@dataclass(frozen=True)
class Params:
    """Arguments written one parameter at a time: `open KEY mid VALUE close`, `sep` between.

    `mids` may differ by the value's kind (DeepSeek's `string="true"`); with `close` the value is
    bare text up to it (strings as they are, other values in `encoders`' syntax); without, each
    value is a literal of its syntax (strings quoted) and `sep` separates the parameters."""

    open: str
    mids: tuple[tuple[str, str], ...]  # (kind, text between key and value); kind "any": one for all
    close: str
    sep: str
    encoders: tuple[tuple[str, ValueSyntax], ...]  # (kind, the syntax a value of that kind is written in)
    bare_strings: bool = True  # strings written as they are (else quoted, in their encoder's syntax)
    sort_keys: bool = False

    def mid(self, kind: str) -> str:
        mids = dict(self.mids)
        return mids.get(kind) or mids.get("any") or mids.get("number") or next(iter(mids.values()))

    def encoder(self, kind: str) -> ValueSyntax:
        return dict(self.encoders).get(kind, JSON)


@dataclass(frozen=True)
class CallFrame:
    block_open: str
    pieces: tuple[Piece, ...]  # one call, its opening and closing text included
    sep: str
    block_close: str
    args: ValueSyntax | Params
    content_after: bool = False  # the template writes the content after the calls (Gemma 4)
    content_sep: str = ""  # between the content and the calls
    index_base: int = 0
    id_name: tuple[str, str] | None = None  # the id holds the name: (text before, text after it)
    markers: tuple[str, ...] = ()  # text that opens a call block and never occurs in an answer

    # -- reading ---------------------------------------------------------------------
    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParseResult:
        start = self._find_block(text, 0)
        if start is None:
            return ParseResult(content=text.strip())
        begin, pos = start
        result = ParseResult(content="")
        before, after = text[:begin], ""
        while True:
            try:
                pos = self._read_calls(text, pos, result, tools)
            except ValueError as exc:
                result.errors.append(f"{exc} (in {text[begin : begin + 300]!r})")
                break
            following = self._find_block(text, pos)
            if following is None:
                after = text[pos:]
                break
            begin, pos = following
        result.content = (before + after if self.content_after else before).strip()
        if not result.calls and not result.errors:
            result.errors.append(f"a tool-call block without a call: {text[begin : begin + 300]!r}")
        return result

    def _find_block(self, text: str, start: int) -> tuple[int, int] | None:
        """Where the next block begins, and where its first call does. A call that opens with a tag
        counts without the block's opening too: templates write it or not by context (DeepSeek-R1
        after a tool output)."""
        block = find_literal(text, self.block_open, start) if self.block_open.strip() else None
        opening = _first_literal(self.pieces)
        call = (
            find_literal(text, opening, start)
            if opening.lstrip().startswith(("<", "[")) or not block
            else None
        )
        if call is not None and (block is None or call[0] < block[0]):
            return call[0], call[0]
        return block

    def _read_calls(self, text: str, pos: int, result: ParseResult, tools) -> int:
        """The calls of one block from `pos`; where the block ends."""
        while True:
            call, pos = self._read_call(text, pos, tools)
            result.calls.append(call)
            if not self._another_call(text, pos):
                end = match_literal(text, pos, self.block_close) if self.block_close.strip() else None
                if end is None and cut_short(text, pos, self.block_close):
                    end = len(text)  # the turn stopped inside the block's closing text
                return pos if end is None else end
            pos = match_literal(text, pos, self.sep) if self.sep.strip() else pos

    def _another_call(self, text: str, pos: int) -> bool:
        """Does a call follow at `pos`? After a separator one must; without one, a call that opens
        with text follows where that text does."""
        if self.sep.strip():
            after = match_literal(text, pos, self.sep)
            if after is None:
                return False
            closing = match_literal(text, pos, self.block_close) if self.block_close.strip() else None
            return closing is None or closing > after
        opening = self.pieces[0]
        return isinstance(opening, str) and match_literal(text, pos, opening) is not None

    def _read_call(self, text: str, pos: int, tools) -> tuple[ParsedCall, int]:
        names, call_id, arguments = [], None, {}
        for i, piece in enumerate(self.pieces):
            if isinstance(piece, str):
                end = match_literal(text, pos, piece)
                if end is None:
                    if i > _last_hole(self.pieces) and cut_short(text, pos, piece):
                        return self._call(names, call_id, arguments), len(text)  # unclosed at the end
                    raise ValueError(f"expected {piece.strip()!r} at {text[pos : pos + 60]!r}")
                pos = end
            elif piece.what == "args":
                name = names[0] if names else _name_of(call_id, self.id_name)
                arguments, pos = self._read_args(text, pos, parameter_types(tools, name))
            else:
                stop = self._stop_after(i)
                value, pos = read_until(text, pos, stop)
                if piece.what == "name":
                    names.append(value.strip())
                elif piece.what == "id":
                    call_id = value.strip()
                elif not value.strip().isdigit():
                    raise ValueError(f"a call index that is no number: {value!r}")
        return self._call(names, call_id, arguments), pos

    def _call(self, names: list[str], call_id: str | None, arguments: dict) -> ParsedCall:
        if names and any(n != names[0] for n in names):
            raise ValueError(f"a call names two tools: {names}")
        name = names[0] if names else _name_of(call_id, self.id_name)
        if not name:
            raise ValueError("a call without a tool name")
        return ParsedCall(name, arguments, call_id)

    def _stop_after(self, index: int) -> str:
        """The literal a text hole ends at: the next piece's text (an object opens with `{`)."""
        for piece in self.pieces[index + 1 :]:
            if isinstance(piece, str) and piece.strip():
                return piece
            if isinstance(piece, Hole) and piece.what == "args":
                return self.args.open if isinstance(self.args, Params) else "{"
        return self.sep if self.sep.strip() else self.block_close

    def _read_args(self, text: str, pos: int, types: dict[str, Any]) -> tuple[dict[str, Any], int]:
        if isinstance(self.args, ValueSyntax):
            value, pos = self.args.read(text, pos)
            if isinstance(value, str):  # arguments written as a JSON string
                value = json.loads(value) if value.strip() else {}
            if not isinstance(value, dict):
                raise ValueError("tool call arguments must be an object")
            return value, pos
        return read_params(self.args, text, pos, types)

    # -- writing ---------------------------------------------------------------------
    def format(self, content: str, calls: list[ParsedCall]) -> str:
        if not calls:
            return content
        block = self.block_open + self.sep.join(self._format_call(c, i) for i, c in enumerate(calls))
        block += self.block_close
        if not content:
            return block
        return block + content if self.content_after else content + self.content_sep + block

    def _format_call(self, call: ParsedCall, index: int) -> str:
        out = []
        for piece in self.pieces:
            if isinstance(piece, str):
                out.append(piece)
            elif piece.what == "name":
                out.append(call.name)
            elif piece.what == "id":
                out.append(call.id or self._id_for(call, index))
            elif piece.what == "index":
                out.append(str(index + self.index_base))
            else:
                out.append(self._format_args(call.arguments))
        return "".join(out)

    def _id_for(self, call: ParsedCall, index: int) -> str:
        if self.id_name is not None:
            return f"{self.id_name[0]}{call.name}{self.id_name[1]}{index}"
        return f"call{index}"

    def _format_args(self, arguments: dict[str, Any]) -> str:
        if isinstance(self.args, ValueSyntax):
            return self.args.encode(arguments)
        params = self.args
        items = sorted(arguments.items()) if params.sort_keys else arguments.items()
        parts = []
        for key, value in items:
            kind = value_kind(value)
            text = value if kind == "string" and params.bare_strings else params.encoder(kind).encode(value)
            parts.append(params.open + key + params.mid(kind) + text + params.close)
        return params.sep.join(parts)


def read_params(params: Params, text: str, pos: int, types: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """Parameters from `pos` on, as many as follow one another."""
    out: dict[str, Any] = {}
    mids = dict(params.mids)
    mid_stop = common_prefix(list(mids.values())) or next(iter(mids.values()))
    while True:
        start = pos
        if out and params.sep.strip():
            after_sep = match_literal(text, pos, params.sep)
            if after_sep is None:
                return out, start
            pos = after_sep
        begin = match_literal(text, pos, params.open) if params.open.strip() else skip_space(text, pos)
        if begin is None or (not params.open.strip() and not _starts_key(text, begin, mid_stop)):
            return out, start
        key, pos = read_until(text, begin, mid_stop)
        key = key.strip()
        kind, pos = _read_mid(mids, text, pos)
        declared = types.get(key)
        if params.close.strip():
            raw, pos = read_until(text, pos, params.close)
            raw = trim(raw, trailing_space(params.mid(kind)), leading_space(params.close))
            out[key] = _typed(raw, declared or kind, params)
            end = match_literal(text, pos, params.close)
            pos = len(text) if end is None else end
        else:
            out[key], pos = _read_literal(text, pos, params, declared or kind)


def _read_mid(mids: dict[str, str], text: str, pos: int) -> tuple[str, int]:
    """Which of the value kinds' mids follows the key (the longest that matches)."""
    for kind, mid in sorted(mids.items(), key=lambda kv: -len(kv[1])):
        end = match_literal(text, pos, mid, tail="none")
        if end is not None:
            return kind, end
    raise ValueError(
        f"expected {next(iter(mids.values())).strip()!r} after a parameter name at {text[pos : pos + 60]!r}"
    )


def _typed(raw: str, kind: Any, params: Params) -> Any:
    """A value written as bare text, as the kind its schema (or its mid) declares: a string as it
    is (or unquoted), anything else decoded, and the text itself where it decodes to nothing."""
    if kind == "string":
        if params.bare_strings:
            return raw
        try:
            return params.encoder("string").decode(raw)
        except ValueError:
            return raw
    for syntax in (params.encoder(kind if isinstance(kind, str) else "object"), JSON):
        try:
            return syntax.decode(raw)
        except ValueError:
            continue
    return raw


def _read_literal(text: str, pos: int, params: Params, kind: Any) -> tuple[Any, int]:
    syntaxes = [params.encoder(kind if isinstance(kind, str) else "string"), *dict(params.encoders).values()]
    for syntax in syntaxes:
        try:
            return syntax.read(text, pos)
        except ValueError:
            continue
    raise ValueError(f"no parameter value at {text[pos : pos + 60]!r}")


def _starts_key(text: str, pos: int, mid: str) -> bool:
    """Does a key (text up to `mid` with no line break) start at `pos`?"""
    first = literal_chunks(mid)[0] if literal_chunks(mid) else mid
    end = text.find(first, pos)
    return end > pos and "\n" not in text[pos:end] and not any(c in text[pos:end] for c in "()[]{}<>,")


def _first_literal(pieces: tuple[Piece, ...]) -> str:
    for piece in pieces:
        if isinstance(piece, str) and piece.strip():
            return piece
    return ""


def _last_hole(pieces: tuple[Piece, ...]) -> int:
    return max((i for i, p in enumerate(pieces) if isinstance(p, Hole)), default=-1)


def _name_of(call_id: str | None, id_name: tuple[str, str] | None) -> str:
    """The tool name inside an id written as `before NAME after INDEX` (Kimi-K2's functions.NAME:0)."""
    if not call_id or id_name is None:
        return ""
    before, after = id_name
    if not call_id.startswith(before):
        return ""
    rest = call_id[len(before) :]
    at = rest.rfind(after) if after else len(rest)
    return rest[:at] if at > 0 else ""
