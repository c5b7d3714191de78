"""Web search and Wikipedia MCP server. Needs `GOOGLE_API_KEY` and `GOOGLE_CSE_ID`
(Google Programmable Search); without them it does not start and the gateway reports
it as disabled, naming the missing keys.

`GOOGLE_SEARCH_API_BASE` and `WIKI_API_BASE` point it at a mirror or a test server.

Run: `aworld-train env up gaia-search [--port N]`.
"""

from __future__ import annotations

import os
from urllib.parse import quote

import httpx
from mcp.server.fastmcp import FastMCP

from aworld_train.env.mcp_fixes import contain_session_errors, settings_from_env

REQUIRED_ENV = ("GOOGLE_API_KEY", "GOOGLE_CSE_ID")
SEARCH_API = "https://www.googleapis.com/customsearch/v1"
WIKI_API = "https://en.wikipedia.org/api/rest_v1"
TIMEOUT_S = 20.0


def missing_keys(env: dict[str, str] | None = None) -> list[str]:
    env = os.environ if env is None else env
    return [key for key in REQUIRED_ENV if not env.get(key)]


async def web_search_results(query: str, num_results: int = 5) -> str:
    params = {
        "key": os.environ["GOOGLE_API_KEY"],
        "cx": os.environ["GOOGLE_CSE_ID"],
        "q": query,
        "num": max(1, min(num_results, 10)),
    }
    async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
        response = await client.get(os.environ.get("GOOGLE_SEARCH_API_BASE") or SEARCH_API, params=params)
        response.raise_for_status()
    items = response.json().get("items", [])
    if not items:
        return f"no results for {query!r}"
    return "\n\n".join(f"{i}. {it.get('title', '')}\n{it.get('link', '')}\n{it.get('snippet', '')}"
                       for i, it in enumerate(items, 1))  # fmt: skip


async def wiki_summary_text(title: str) -> str:
    base = (os.environ.get("WIKI_API_BASE") or WIKI_API).rstrip("/")
    async with httpx.AsyncClient(timeout=TIMEOUT_S, follow_redirects=True) as client:
        response = await client.get(f"{base}/page/summary/{quote(title.replace(' ', '_'), safe='')}")
    if response.status_code == 404:
        return f"no Wikipedia page titled {title!r}; try web_search first"
    response.raise_for_status()
    page = response.json()
    return f"{page.get('title', title)}\n{page.get('extract', '')}"


def build_server(host: str = "127.0.0.1", port: int = 0) -> FastMCP:
    contain_session_errors()
    server = FastMCP("search", host=host, port=port, **settings_from_env())

    @server.tool()
    async def web_search(query: str, num_results: int = 5) -> str:
        """Search the web; returns titles, links and snippets."""
        return await web_search_results(query, num_results)

    @server.tool()
    async def wiki_summary(title: str) -> str:
        """The summary of the English Wikipedia page with this title."""
        return await wiki_summary_text(title)

    return server


def serve(transport: str = "http", host: str = "127.0.0.1", port: int = 8768) -> None:
    missing = missing_keys()
    if missing:
        raise SystemExit(f"search server disabled: set {', '.join(missing)} (see env/gaia/.env_template)")
    build_server(host, port).run(transport="streamable-http" if transport == "http" else "stdio")
