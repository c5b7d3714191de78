"""Calculator MCP server: safe arithmetic by AST, never `eval`.

Allowed: numbers, + - * / // % **, parentheses, unary + and -. Exponents and
result sizes are bounded. Names, calls, attributes and everything else are
rejected with a tool error. `last_result` returns the previous result of the
calling episode (keyed by the X-Episode-Id header the trainer injects), which
makes cross-talk between episodes visible in tests.

Latency (for benchmarks of asynchronous training): with CALCULATOR_LATENCY_P50_S and
CALCULATOR_LATENCY_P99_S set, every `calculate` call first sleeps a log-normal time with that
median and 99th percentile (a web-search tool's long tail: e.g. 0.3 s and 8 s), drawn in call order
from CALCULATOR_LATENCY_SEED (default 0). In a run: env: [{name: calculator, env: {...}}].

Run: `aworld-train env up calculator [--port N] [--transport http|stdio]`.
"""
# No `from __future__ import annotations` here: FastMCP must see the real Context type.

import ast
import asyncio
import math
import operator
import os
import random
from collections import OrderedDict
from collections.abc import Callable
from statistics import NormalDist

from mcp.server.fastmcp import Context, FastMCP

from aworld_train.env.episode import episode_of
from aworld_train.env.mcp_fixes import contain_session_errors, episode_keyed_settings

MAX_EXPONENT = 1000
MAX_ABS = 10**100
MAX_EXPRESSION_CHARS = 500
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class CalculatorError(ValueError):
    pass


def _check(value: float | int) -> float | int:
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("result is not a finite number")
    if abs(value) > MAX_ABS:
        raise CalculatorError("result is too large")
    return value


def _eval(node: ast.AST) -> float | int:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _check(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculatorError(f"exponent {right} is larger than {MAX_EXPONENT}")
        if isinstance(node.op, ast.Pow) and abs(left) > 1 and abs(right) * math.log10(abs(left)) > 100:
            raise CalculatorError("result is too large")
        try:
            return _check(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _check(_UNARY[type(node.op)](_eval(node.operand)))
    kind = type(node).__name__
    if isinstance(node, ast.Name):
        raise CalculatorError(f"names are not allowed ({node.id!r})")
    if isinstance(node, ast.Call):
        raise CalculatorError("function calls are not allowed")
    if isinstance(node, ast.Attribute):
        raise CalculatorError("attributes are not allowed")
    raise CalculatorError(f"{kind} is not allowed; use numbers, + - * / // % ** and parentheses")


def format_number(value: float | int) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, float):
        return repr(round(value, 10))
    return str(value)


def evaluate(expression: str) -> str:
    """The value of an arithmetic expression as text; CalculatorError on anything else."""
    if not isinstance(expression, str) or not expression.strip():
        raise CalculatorError("expression is empty")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip().replace("^", "**"), mode="eval")
    except SyntaxError:
        raise CalculatorError(f"cannot parse {expression!r}") from None
    return format_number(_eval(tree))


class _EpisodeMemory:
    """Last result per episode id, bounded so a long-running server does not grow."""

    def __init__(self, capacity: int = 10000) -> None:
        self._data: OrderedDict[str, str] = OrderedDict()
        self._capacity = capacity

    def put(self, episode: str, value: str) -> None:
        self._data[episode] = value
        self._data.move_to_end(episode)
        while len(self._data) > self._capacity:
            self._data.popitem(last=False)

    def get(self, episode: str) -> str | None:
        return self._data.get(episode)


def lognormal_latency(p50_s: float, p99_s: float, seed: int = 0) -> Callable[[], float]:
    """Seconds per call, log-normal with median `p50_s` and 99th percentile `p99_s`."""
    if not 0 < p50_s <= p99_s:
        raise ValueError(
            f"calculator latency p50 {p50_s} s and p99 {p99_s} s: give 0 < "
            "CALCULATOR_LATENCY_P50_S <= CALCULATOR_LATENCY_P99_S"
        )
    sigma = math.log(p99_s / p50_s) / NormalDist().inv_cdf(0.99)
    draw = random.Random(seed)
    return lambda: draw.lognormvariate(math.log(p50_s), sigma)


def latency_from_environment() -> Callable[[], float] | None:
    p50, p99 = os.environ.get("CALCULATOR_LATENCY_P50_S"), os.environ.get("CALCULATOR_LATENCY_P99_S")
    if not p50 and not p99:
        return None
    if not (p50 and p99):
        raise ValueError("calculator latency: set both CALCULATOR_LATENCY_P50_S and CALCULATOR_LATENCY_P99_S")
    return lognormal_latency(float(p50), float(p99), int(os.environ.get("CALCULATOR_LATENCY_SEED", "0")))


def build_server(host: str = "127.0.0.1", port: int = 0) -> FastMCP:
    contain_session_errors()
    latency = latency_from_environment()  # before the server starts: a bad setting stops it at once
    # the memory is keyed by episode header; FASTMCP_LOG_LEVEL=INFO logs every request again
    server = FastMCP("calculator", host=host, port=port, **episode_keyed_settings())
    memory = _EpisodeMemory()

    @server.tool()
    async def calculate(expression: str, ctx: Context) -> str:
        """Evaluate an arithmetic expression with + - * / // % ** and parentheses, e.g. '(3 + 4) * 12'."""
        if latency is not None:
            await asyncio.sleep(latency())
        result = evaluate(expression)
        memory.put(episode_of(ctx), result)
        return result

    @server.tool()
    def last_result(ctx: Context) -> str:
        """The result of this conversation's previous calculation."""
        value = memory.get(episode_of(ctx))
        if value is None:
            raise CalculatorError("no calculation yet in this conversation")
        return value

    return server


def serve(transport: str = "http", host: str = "127.0.0.1", port: int = 8765) -> None:
    server = build_server(host, port)
    server.run(transport="streamable-http" if transport == "http" else "stdio")
