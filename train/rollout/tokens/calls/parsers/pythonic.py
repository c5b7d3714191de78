"""`pythonic`: calls written as a Python list of calls, `[get_weather(city='Paris', days=3), ...]`,
between `<|tool_call_start|>` and `<|tool_call_end|>` (LFM2's models; Llama 4's write the same list
without them).

Read with Python's own parser (`ast`), never evaluated: each call is a plain name called with
keyword arguments whose values are literals (strings, numbers, booleans, None, lists and dicts of
them). Anything else inside the list (an expression, a positional argument) makes the turn
malformed rather than a call run with a guess.
"""

from __future__ import annotations

import ast
from typing import Any

from aworld_train.rollout.tokens.calls.parsers.base import ParsedCall, ParseResult, register

START, END = "<|tool_call_start|>", "<|tool_call_end|>"


@register("pythonic")
class PythonicParser:
    name = "pythonic"

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParseResult:
        if START in text:
            at = text.index(START)
            body = text[at + len(START) :]
            body = body[: body.index(END)] if END in body else body
        else:
            at, body = _bare_list(text)
            if at < 0:
                return ParseResult(content=text.strip())
        result = ParseResult(content=text[:at].strip())
        try:
            result.calls.extend(_calls(body.strip()))
        except (SyntaxError, ValueError) as exc:
            result.errors.append(f"not a list of calls ({exc}): {body[:200]!r}")
        return result

    def format(self, content: str, calls: list[ParsedCall]) -> str:
        if not calls:
            return content
        written = ", ".join(
            f"{c.name}({', '.join(f'{key}={value!r}' for key, value in c.arguments.items())})" for c in calls
        )
        return f"{content}{START}[{written}]{END}"


def _bare_list(text: str) -> tuple[int, str]:
    """Where a turn that is only a list of calls begins (-1: it is not one) and the list."""
    stripped = text.strip()
    if not (stripped.startswith("[") and stripped.endswith("]")):
        return -1, ""
    try:
        tree = ast.parse(stripped, mode="eval").body
    except SyntaxError:
        return -1, ""
    if isinstance(tree, ast.List) and tree.elts and all(isinstance(e, ast.Call) for e in tree.elts):
        return text.index("["), stripped
    return -1, ""


def _calls(body: str) -> list[ParsedCall]:
    tree = ast.parse(body, mode="eval").body
    if not isinstance(tree, ast.List):
        raise ValueError("the calls are not written as a list")
    calls = []
    for node in tree.elts:
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            raise ValueError(f"{ast.unparse(node)!r} is not a call of a tool by its name")
        if node.args or any(kw.arg is None for kw in node.keywords):
            raise ValueError(f"{node.func.id}: arguments must be given by name")
        calls.append(ParsedCall(node.func.id, {kw.arg: _literal(kw.value) for kw in node.keywords}))
    return calls


def _literal(node: ast.AST) -> Any:
    """A keyword argument's value: a literal only (ast.literal_eval evaluates nothing else)."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ValueError(f"{ast.unparse(node)!r} is not a literal value") from None
