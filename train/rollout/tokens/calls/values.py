"""How a chat template writes a JSON value (a call's arguments, a parameter's value) as text.

Most templates write JSON (`tojson`); some write Python's `repr` (a dict rendered as `{'a': 1}`,
`True`); a few have a dialect of their own (Gemma 4: `{city:<|"|>Paris<|"|>,days:3}`). A
`ValueSyntax` reads one such value from text (`read`: where it starts, it returns the value and
where it ends) and writes one (`encode`) exactly as the template does. `find_value` learns which
syntax a template used from its rendering of a known value.

JSON and Python values are read by `json` and `ast.literal_eval` (their escapes are theirs); a
dialect is read by the small scanner below, with its string quotes, key quotes and separators
learned from the rendering (strings in a dialect are raw between their quotes).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_PY_SCALAR = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|True|False|None")
_BARE_KEY = re.compile(r"[A-Za-z_][\w.-]*")


@dataclass(frozen=True)
class ValueSyntax:
    kind: Literal["json", "python", "dialect"]
    # json: json.dumps's separators, key order and escaping, as the template's `tojson` gave them
    separators: tuple[str, str] = (", ", ": ")
    sort_keys: bool = False
    ensure_ascii: bool = False
    # dialect: string quotes, key quotes, key-value and item separators, literals
    quote: tuple[str, str] = ('"', '"')
    key_quote: tuple[str, str] = ("", "")
    colon: str = ":"
    comma: str = ","
    literals: tuple[str, str, str] = ("true", "false", "null")

    # -- writing -------------------------------------------------------------------
    def encode(self, value: Any) -> str:
        if self.kind == "json":
            return json.dumps(
                value, ensure_ascii=self.ensure_ascii, separators=self.separators, sort_keys=self.sort_keys
            )
        if self.kind == "python":
            return repr(value)
        return self._encode_dialect(value)

    def _encode_dialect(self, value: Any) -> str:
        true, false, null = self.literals
        if value is True:
            return true
        if value is False:
            return false
        if value is None:
            return null
        if isinstance(value, str):
            return self.quote[0] + value + self.quote[1]
        if isinstance(value, (int, float)):
            return json.dumps(value)
        if isinstance(value, list):
            return "[" + self.comma.join(self._encode_dialect(v) for v in value) + "]"
        items = sorted(value.items()) if self.sort_keys else value.items()
        return (
            "{"
            + self.comma.join(
                f"{self.key_quote[0]}{k}{self.key_quote[1]}{self.colon}{self._encode_dialect(v)}"
                for k, v in items
            )
            + "}"
        )

    # -- reading -------------------------------------------------------------------
    def read(self, text: str, pos: int = 0) -> tuple[Any, int]:
        """The value that starts at `pos` (after whitespace) and the index just after it; ValueError
        when there is none."""
        pos = _skip_space(text, pos)
        if self.kind == "json":
            try:
                return json.JSONDecoder().raw_decode(text, pos)
            except json.JSONDecodeError as exc:
                raise ValueError(f"no JSON value at {text[pos : pos + 40]!r}: {exc.msg}") from None
        if self.kind == "python":
            end = _python_end(text, pos)
            try:
                return ast.literal_eval(text[pos:end]), end
            except (ValueError, SyntaxError) as exc:
                raise ValueError(f"no Python literal at {text[pos : pos + 40]!r}: {exc}") from None
        return self._read_dialect(text, pos)

    def decode(self, text: str) -> Any:
        """A whole text as one value (surrounding whitespace allowed)."""
        value, end = self.read(text, 0)
        if text[end:].strip():
            raise ValueError(f"text after the value: {text[end : end + 40]!r}")
        return value

    def _read_dialect(self, text: str, pos: int) -> tuple[Any, int]:
        pos = _skip_space(text, pos)
        open_quote, close_quote = self.quote
        if text.startswith(open_quote, pos):
            end = text.find(close_quote, pos + len(open_quote))
            if end < 0:
                raise ValueError(f"unclosed string at {text[pos : pos + 40]!r}")
            return text[pos + len(open_quote) : end], end + len(close_quote)
        if text.startswith("{", pos):
            return self._read_items(text, pos + 1, "}", keyed=True)
        if text.startswith("[", pos):
            return self._read_items(text, pos + 1, "]", keyed=False)
        for literal, value in zip(self.literals, (True, False, None), strict=True):
            if text.startswith(literal, pos):
                return value, pos + len(literal)
        number = _NUMBER.match(text, pos)
        if number:
            return json.loads(number.group()), number.end()
        raise ValueError(f"no value at {text[pos : pos + 40]!r}")

    def _read_items(self, text: str, pos: int, close: str, keyed: bool) -> tuple[Any, int]:
        items: list[Any] = []
        pairs: dict[str, Any] = {}
        pos = _skip_space(text, pos)
        if text.startswith(close, pos):
            return (pairs if keyed else items), pos + 1
        while True:
            if keyed:
                key, pos = self._read_key(text, pos)
                pos = _expect(text, pos, self.colon)
                pairs[key], pos = self._read_dialect(text, pos)
            else:
                value, pos = self._read_dialect(text, pos)
                items.append(value)
            pos = _skip_space(text, pos)
            if text.startswith(close, pos):
                return (pairs if keyed else items), pos + 1
            pos = _expect(text, pos, self.comma)

    def _read_key(self, text: str, pos: int) -> tuple[str, int]:
        pos = _skip_space(text, pos)
        open_quote, close_quote = self.key_quote
        if open_quote:
            pos = _expect(text, pos, open_quote)
            end = text.find(close_quote, pos)
            if end < 0:
                raise ValueError(f"unclosed key at {text[pos : pos + 40]!r}")
            return text[pos:end], end + len(close_quote)
        match = _BARE_KEY.match(text, pos)
        if not match:
            raise ValueError(f"no key at {text[pos : pos + 40]!r}")
        return match.group(), match.end()


JSON = ValueSyntax("json")
PYTHON = ValueSyntax("python")


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _expect(text: str, pos: int, token: str) -> int:
    pos = _skip_space(text, pos)
    stripped = token.strip()
    if not text.startswith(stripped, pos):
        raise ValueError(f"expected {stripped!r} at {text[pos : pos + 40]!r}")
    return pos + len(stripped)


def _python_end(text: str, pos: int) -> int:
    """Where the Python literal that starts at `pos` ends: brackets balanced, quotes respected."""
    if pos >= len(text):
        return pos
    if text[pos] not in "{[('\"":
        scalar = _PY_SCALAR.match(text, pos)
        return scalar.end() if scalar else pos
    depth, quote, at = 0, "", pos
    while at < len(text):
        char = text[at]
        if quote:
            if char == "\\":
                at += 1
            elif char == quote:
                quote = ""
                if depth == 0:
                    return at + 1
        elif char in "'\"":
            quote = char
        elif char in "{[(":
            depth += 1
        elif char in "}])":
            depth -= 1
            if depth == 0:
                return at + 1
        at += 1
    return at


# -- learning the syntax from a rendering -----------------------------------------------------

_JSON_VARIANTS = [
    ValueSyntax("json", separators=seps, sort_keys=sort, ensure_ascii=ascii_)
    for seps in ((", ", ": "), (",", ":"))
    for sort in (False, True)
    for ascii_ in (False, True)
]


def find_value(text: str, value: Any, lo: int, hi: int) -> tuple[ValueSyntax, int, int] | None:
    """The syntax in which `text[lo:hi]` holds `value` (an object or a list), with the span it
    takes: the first opening bracket from which a syntax reads back exactly `value`. The syntax
    is exact where one of its variants writes the span as it is (else the first that reads it)."""
    opener = "{" if isinstance(value, dict) else "["
    at = text.find(opener, lo, hi)
    while at >= 0:
        for syntax in (JSON, PYTHON, _dialect_of(text, at, value)):
            if syntax is None:
                continue
            try:
                read, end = syntax.read(text, at)
            except ValueError:
                continue
            if read == value and type(read) is type(value) and _same_types(read, value) and end <= hi:
                return _exact(syntax, text[at:end], value), at, end
        at = text.find(opener, at + 1, hi)
    return None


def _same_types(a: Any, b: Any) -> bool:
    """Equal values of equal JSON types (1 == True in Python; a template may write either)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return all(_same_types(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return all(_same_types(x, y) for x, y in zip(a, b, strict=True))
    return True


def _exact(syntax: ValueSyntax, span: str, value: Any) -> ValueSyntax:
    if syntax.kind == "json":
        for variant in _JSON_VARIANTS:
            if variant.encode(value) == span:
                return variant
    if syntax.kind == "dialect":
        for sort in (False, True):
            variant = ValueSyntax(**{**syntax.__dict__, "sort_keys": sort})
            if variant.encode(value) == span:
                return variant
    return syntax


def _dialect_of(text: str, at: int, value: Any) -> ValueSyntax | None:
    """A dialect read off the rendering of `value` (an object holding a string, a number and a
    boolean among its values) at `at`; None where the rendering does not show one."""
    if not isinstance(value, dict):
        return None
    strings = [(k, v) for k, v in value.items() if isinstance(v, str)]
    numbers = [(k, v) for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool)]
    booleans = [k for k, v in value.items() if v is True]
    if not (strings and numbers):
        return None
    if any(_find(text, k, at) < 0 for k in value):
        return None
    key_at = min(_find(text, k, at) for k in value)
    key_open = text[at + 1 : key_at].strip()
    key_close = key_open  # quotes come in pairs
    number_key, number = numbers[0]
    n_key_at = _find(text, number_key, at)
    n_at = text.find(str(number), n_key_at + len(number_key))
    if n_at < 0:
        return None
    colon = text[n_key_at + len(number_key) + len(key_close) : n_at]
    s_key, s_value = strings[0]
    s_key_at = _find(text, s_key, at)
    s_at = text.find(s_value, s_key_at + len(s_key))
    if s_at < 0:
        return None
    quote_open = text[s_key_at + len(s_key) + len(key_close) + len(colon) : s_at]
    after = text[n_at + len(str(number)) :]
    comma = after[: min((i for i in (after.find(key_open + k) for k in value) if i >= 0), default=0)]
    comma = comma[: len(comma) - len(key_open)] if key_open and comma.endswith(key_open) else comma
    if not comma.strip() or not quote_open:
        return None
    rest = text[s_at + len(s_value) :]
    ends = [i for i in (rest.find(comma), rest.find("}")) if i >= 0]
    quote_close = rest[: min(ends)] if ends else ""
    true = "true"
    if booleans:
        b_at = _find(text, booleans[0], at) + len(booleans[0]) + len(key_close) + len(colon)
        true = next((w for w in ("true", "True") if text.startswith(w, b_at)), "true")
    literals = ("true", "false", "null") if true == "true" else ("True", "False", "None")
    return ValueSyntax(
        "dialect",
        quote=(quote_open, quote_close),
        key_quote=(key_open, key_close),
        colon=colon,
        comma=comma,
        literals=literals,
    )


def _find(text: str, key: str, start: int) -> int:
    return text.find(key, start)
