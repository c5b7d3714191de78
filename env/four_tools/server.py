"""The four-tool MCP server: calculator, weather_query, search, get_current_time.

The clock and the default date of weather_query follow the task id of the request's
`X-Task-Id` header (fixed per task, so per episode); without it the clock is the epoch's.

Run: `aworld-train env up four-tools [--port N]`.
"""
# No `from __future__ import annotations` here: FastMCP must see the real Context type.

from mcp.server.fastmcp import Context, FastMCP

from aworld_train.core.protocol import TASK_HEADER
from aworld_train.env.four_tools import tools
from aworld_train.env.mcp_fixes import contain_session_errors, episode_keyed_settings


def _task_of(ctx: Context) -> str:
    try:
        request = ctx.request_context.request
        return request.headers.get(TASK_HEADER, "") if request is not None else ""
    except (AttributeError, ValueError, LookupError):
        return ""


def build_server(host: str = "127.0.0.1", port: int = 0) -> FastMCP:
    contain_session_errors()
    server = FastMCP("four-tools", host=host, port=port, **episode_keyed_settings())  # task header

    @server.tool()
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression with + - * / // % ** and parentheses, e.g. '(3 + 4) * 12'."""
        return tools.calculate(expression)

    @server.tool()
    def weather_query(city: str, ctx: Context, date: str = "today") -> str:
        """The weather of a city on a date ('today', 'tomorrow' or YYYY-MM-DD)."""
        return tools.weather_text(tools.weather(city, date, _task_of(ctx)))

    @server.tool()
    def search(query: str) -> str:
        """Search a small encyclopedia; returns the two best matching notes."""
        return tools.search_text(query)

    @server.tool()
    def get_current_time(ctx: Context) -> str:
        """The current date and time (UTC)."""
        return tools.current_time(_task_of(ctx))

    return server


def serve(transport: str = "http", host: str = "127.0.0.1", port: int = 8768) -> None:
    build_server(host, port).run(transport="streamable-http" if transport == "http" else "stdio")
