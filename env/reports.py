"""Depot reports MCP server: one long daily report per call, each with one fact a later answer needs.

`read_report(depot, day)` returns a depot's log for that day: eight routine lines full of other
numbers, and one line `Crates received: N.`. A question asks for the crates over several days, so
the reports read first are needed at the end, and a few reports overflow a small context budget
(examples/long_reports/): an agent that keeps each day's count in its summary can answer; one that
only sees its last messages, or that is cut at the budget, cannot. Reports are a pure function of
(depot, day), so the task generator knows every answer without a server.

Run: `aworld-train env up reports [--port N] [--transport http|stdio]`.
"""
# No `from __future__ import annotations` here: FastMCP must see the real Context type.

import random

from mcp.server.fastmcp import FastMCP

from aworld_train.env.mcp_fixes import contain_session_errors, episode_keyed_settings

MAX_DAY = 9
ROUTINE_LINES = 8  # about 170 tokens a report: three overflow the examples' 1k-token budget
ROUTINE = (
    "{h:02d}:00 gate opened, {n} staff on shift.",
    "{h:02d}:10 forklift {n} charged to {p} percent.",
    "{h:02d}:20 cold room at {n} degrees, checked by staff {m}.",
    "{h:02d}:30 truck {n} waited {m} minutes at bay {k}.",
    "{h:02d}:40 {n} pallets moved from aisle {m} to aisle {k}.",
    "{h:02d}:50 {n} boxes returned to supplier {m}.",
    "{h:02d}:05 alarm test on floor {n} passed.",
    "{h:02d}:15 {n} orders packed for route {m}.",
    "{h:02d}:25 scanner {n} replaced, {m} labels reprinted.",
    "{h:02d}:35 lunch break, {n} staff at the canteen.",
)


class ReportError(ValueError):
    """A report that does not exist: the message says which days and depots do."""


def title(depot: str, day: int) -> str:
    """A report's first line, which names its depot and day (what the reward reads as "read")."""
    return f"Depot {depot}, day {day} report."


def report(depot: str, day: int) -> tuple[str, int]:
    """The depot's report for the day and the crates it received (2 to 9)."""
    depot = str(depot).strip().upper()
    if not depot:
        raise ReportError("depot is empty: pass the depot code the question names, such as 'K7'")
    if not isinstance(day, int) or not 1 <= day <= MAX_DAY:
        raise ReportError(f"day must be a whole number from 1 to {MAX_DAY}")
    rng = random.Random(f"{depot}/{day}")
    crates = rng.randint(2, 9)
    lines = []
    for hour, template in zip(range(6, 18), rng.sample(ROUTINE, ROUTINE_LINES), strict=False):
        values = {
            "n": rng.randint(1, 40),
            "m": rng.randint(1, 40),
            "k": rng.randint(1, 9),
            "p": rng.randint(20, 99),
        }
        lines.append(template.format(h=hour, **values))
    lines.insert(rng.randint(2, len(lines) - 2), f"Crates received: {crates}.")
    return title(depot, day) + "\n" + "\n".join(lines) + "\nGate closed.", crates


def build_server(host: str = "127.0.0.1", port: int = 0) -> FastMCP:
    contain_session_errors()
    server = FastMCP("reports", host=host, port=port, **episode_keyed_settings())

    @server.tool()
    def read_report(depot: str, day: int) -> str:
        """Read a depot's report for one day (day 1 is the first)."""
        return report(depot, day)[0]

    return server


def serve(transport: str = "http", host: str = "127.0.0.1", port: int = 8769) -> None:
    server = build_server(host, port)
    server.run(transport="streamable-http" if transport == "http" else "stdio")
