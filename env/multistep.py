"""Multi-step arithmetic MCP server: a calculator that does one operation per call.

`calculate` takes exactly two numbers and one of + - * (e.g. '42 * 3'); anything longer is refused
with a tool error that says so, so a question such as '((17 + 25) * 3) - 40' needs one call per
operation, each on the result of the one before. That dependency is what the multi-step task
(examples/multistep/) trains: the answer is right only if every step was.

Run: `aworld-train env up multistep [--port N] [--transport http|stdio]`.
"""
# No `from __future__ import annotations` here: FastMCP must see the real Context type.

import ast

from mcp.server.fastmcp import FastMCP

from aworld_train.env.calculator import CalculatorError, evaluate
from aworld_train.env.mcp_fixes import contain_session_errors, episode_keyed_settings

OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}
ONE_OPERATION = "one operation per call: two numbers and one of + - *"


def _number(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def one_operation(expression: str) -> str:
    """`a op b = value`: the operation it computed and its value, so that the agent sees which step
    of its question is done; CalculatorError naming the rule for anything else."""
    if not isinstance(expression, str) or not expression.strip():
        raise CalculatorError("expression is empty; " + ONE_OPERATION)
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError:
        raise CalculatorError(f"cannot parse {expression!r}; {ONE_OPERATION}") from None
    if not (isinstance(tree, ast.BinOp) and type(tree.op) in OPERATORS):
        raise CalculatorError(ONE_OPERATION)
    if not (_number(tree.left) and _number(tree.right)):
        raise CalculatorError(ONE_OPERATION)
    return f"{ast.unparse(tree)} = {evaluate(expression)}"


def build_server(host: str = "127.0.0.1", port: int = 0) -> FastMCP:
    contain_session_errors()
    server = FastMCP("multistep", host=host, port=port, **episode_keyed_settings())

    @server.tool()
    def calculate(expression: str) -> str:
        """Compute one operation: two numbers and one of + - *, such as '12 + 7'."""
        return one_operation(expression)

    return server


def serve(transport: str = "http", host: str = "127.0.0.1", port: int = 8766) -> None:
    server = build_server(host, port)
    server.run(transport="streamable-http" if transport == "http" else "stdio")
