"""StableToolBench's API server: the request the MCP server sends, and a cache-backed stand-in.

The server (StableToolBench `server/main.py`) answers `POST /virtual` with a JSON body
`{category, tool_name, api_name, tool_input, strip, toolbench_key}` (tool_input a JSON
string or an object) by `{"error": "", "response": ...}`. It looks a call up first in its
cache folder: `<cache>/<category>/<tool>_for_<category>/<api>.json`, with the category,
tool and API names in their standard form, holding a mapping from `str(tool_input)` (the
arguments as a Python dict's text) to the recorded answer.

The stand-in answers from such a folder alone, so tests and offline runs need neither the
real APIs nor a model behind them: a call not in the cache gets an error answer, as a
failed API does. `aworld-train env up toolbench-cache` with AWORLD_TRAIN_TOOLBENCH_CACHE
naming the folder; AWORLD_TRAIN_TOOLBENCH_EXPECTED_KEY, when set, is the only key it accepts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from aworld_train.env.toolbench.catalog import Api, api_part, standard_category, standardize

CACHE_VARIABLE = "AWORLD_TRAIN_TOOLBENCH_CACHE"
EXPECTED_KEY_VARIABLE = "AWORLD_TRAIN_TOOLBENCH_EXPECTED_KEY"
FIELDS = ("category", "tool_name", "api_name", "tool_input", "strip", "toolbench_key")


def request_body(api: Api, arguments: dict[str, Any], key: str, strip: str = "") -> dict[str, Any]:
    """The body StableToolBench's `/virtual` takes for one call of `api`."""
    return {
        "category": api.category,
        "tool_name": standardize(api.tool),
        "api_name": api_part(api.api),
        "tool_input": json.dumps(arguments),
        "strip": strip,
        "toolbench_key": key,
    }


def cache_file(cache: Path, category: str, tool_name: str, api_name: str) -> Path:
    """Where StableToolBench's server keeps the recorded answers of one API."""
    folder = standard_category(category)
    tool = tool_name if tool_name.endswith(f"_for_{folder}") else f"{standardize(tool_name)}_for_{folder}"
    api = api_part(api_name).split(f"_for_{tool_name}")[0]
    return cache / folder / tool / f"{api}.json"


def cache_key(tool_input: Any) -> str:
    """The cache's key for a call: the arguments as the text of a Python dict."""
    if isinstance(tool_input, str):
        tool_input = json.loads(tool_input) if tool_input.strip() else {}
    return str(tool_input)


def answer_from_cache(cache: Path, body: dict[str, Any]) -> dict[str, Any]:
    missing = [f for f in FIELDS if f not in body]
    if missing:
        return {"error": f"request lacks {', '.join(missing)}", "response": ""}
    try:
        key = cache_key(body["tool_input"])
    except (json.JSONDecodeError, TypeError):
        return {"error": "Tool input parse error...\n", "response": ""}
    path = cache_file(cache, str(body["category"]), str(body["tool_name"]), str(body["api_name"]))
    try:
        records = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, json.JSONDecodeError) as exc:
        return {"error": f"cache file {path.name} cannot be read: {exc}", "response": ""}
    if key not in records:
        return {"error": f"no recorded response of {body['api_name']} for {key}", "response": ""}
    return records[key]


def build_app(cache: str | Path | None = None, expected_key: str | None = None):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    folder = Path(cache or os.environ.get(CACHE_VARIABLE, ""))
    if not str(folder) or not folder.is_dir():
        raise SystemExit(f"{CACHE_VARIABLE} must name StableToolBench's cache folder, got {str(folder)!r}")
    expected = expected_key if expected_key is not None else os.environ.get(EXPECTED_KEY_VARIABLE)

    async def virtual(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"detail": "the body must be JSON"}, status_code=422)
        if not isinstance(body, dict):
            return JSONResponse({"detail": "the body must be a JSON object"}, status_code=422)
        if expected and body.get("toolbench_key") != expected:
            return JSONResponse({"error": "Unauthorized: wrong toolbench_key", "response": ""})
        return JSONResponse(answer_from_cache(folder, body))

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True, "cache": str(folder)})

    return Starlette(routes=[Route("/virtual", virtual, methods=["POST"]), Route("/health", health)])


def serve(transport: str = "http", host: str = "127.0.0.1", port: int = 8080) -> None:
    import uvicorn

    if transport != "http":
        raise SystemExit("the StableToolBench stand-in is an HTTP server; use --transport http")
    uvicorn.run(build_app(), host=host, port=port, log_level="warning")
