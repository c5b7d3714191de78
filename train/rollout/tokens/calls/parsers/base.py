"""What every tool-call parser shares: the parsed call, the parser protocol, the registry its
modules add themselves to (`register`), reading a turn's call blocks (`calls_from_blocks`), and
helpers for JSON and bare-text arguments."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class ParsedCall:
    name: str
    arguments: dict[str, Any]
    id: str | None = None  # the id the model wrote, where its format has one (Kimi-K2, Mistral)


@dataclass
class ParseResult:
    content: str  # the turn's text without its tool calls
    calls: list[ParsedCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def malformed(self) -> bool:
        return bool(self.errors)


class ToolParser(Protocol):
    name: str

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParseResult:
        """The calls in one assistant turn's text; `tools` (OpenAI function specs) type the
        arguments of formats that write them as bare text."""
        ...

    def format(self, content: str, calls: list[ParsedCall]) -> str:
        """The text of an assistant turn with `content` and `calls`, as the model writes it."""
        ...


REGISTRY: dict[str, Callable[[], ToolParser]] = {}


def register(name: str):
    """Class decorator: make a parser available as `rollout.tool_parser: NAME`."""

    def add(cls):
        if name in REGISTRY:
            raise ValueError(f"tool parser {name!r} is registered twice")
        cls.name = name
        REGISTRY[name] = cls
        return cls

    return add


# -- helpers the parsers share ------------------------------------------------------------


def call_from_object(obj: Any, arguments_keys: tuple[str, ...] = ("arguments", "parameters")) -> ParsedCall:
    """A call from a decoded JSON object {"name": ..., "arguments": {...}} (arguments may be a JSON string)."""
    if not isinstance(obj, dict):
        raise ValueError("tool call must be a JSON object")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("tool call has no 'name'")
    args: Any = {}
    for key in arguments_keys:
        if key in obj:
            args = obj[key]
            break
    args = json_arguments(args)
    call_id = obj.get("id")
    return ParsedCall(name, args, call_id if isinstance(call_id, str) else None)


def json_arguments(args: Any) -> dict[str, Any]:
    if isinstance(args, str):
        args = json.loads(args) if args.strip() else {}
    if not isinstance(args, dict):
        raise ValueError("tool call arguments must be an object")
    return args


def parameter_types(tools: list[dict[str, Any]] | None, name: str) -> dict[str, Any]:
    """The JSON-schema type of each parameter of tool `name` (missing: unknown)."""
    for tool in tools or []:
        spec = tool.get("function", tool)
        if spec.get("name") == name:
            props = (spec.get("parameters") or {}).get("properties") or {}
            return {key: (value or {}).get("type") for key, value in props.items()}
    return {}


def typed_value(raw: str, kind: Any) -> Any:
    """A parameter written as bare text (XML-style formats) as the value its schema declares.

    Such templates write strings as they are and other values as JSON (or Python's str() of a
    number or bool); without a declared type, JSON is tried and the text kept otherwise."""
    if kind == "string":
        return raw
    text = raw.strip()
    if kind == "boolean" and text in ("True", "False"):
        return text == "True"
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return raw


def arguments_text(args: dict[str, Any]) -> str:
    return json.dumps(args, ensure_ascii=False)


def calls_from_blocks(
    text: str,
    start: int,
    blocks: Iterable[Any],
    read: Callable[[Any], ParsedCall],
    *,
    shown: Callable[[Any], str] = str,
    without_call: str | None = None,
) -> ParseResult:
    """A turn whose calls begin at `start`: the text before it as content, each of `blocks` read
    into a call by `read`; a block `read` refuses (ValueError, JSON's errors among them) is an
    error naming it (`shown`), and with `without_call` so is a turn that opened calls and held none."""
    result = ParseResult(content=text[:start].strip())
    for block in blocks:
        try:
            result.calls.append(read(block))
        except ValueError as exc:
            result.errors.append(f"{exc}: {shown(block)[:200]!r}")
    if without_call is not None and not result.calls and not result.errors:
        result.errors.append(f"{without_call}: {text[start : start + 200]!r}")
    return result
