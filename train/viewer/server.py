"""`aworld-train view RUN_DIR [RUN_DIR ...]`: a local web page over run folders.

A starlette app served by uvicorn on loopback (unless `--host` says otherwise): the page is plain
HTML, CSS and JavaScript shipped in `viewer/static/` (no build step, nothing fetched from elsewhere),
and it asks the JSON routes below for data. The page polls the run's overview, so a run still
writing shows its new steps as they land.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from aworld_train.core.errors import ConfigError
from aworld_train.viewer.drift import DriftCount
from aworld_train.viewer.store import Run
from aworld_train.viewer.tokenizer import RunTokenizer
from aworld_train.viewer.views import (
    Filters,
    compare_sets,
    drift_view,
    episode_view,
    episodes_page,
    groups_page,
    run_overview,
)

STATIC = Path(__file__).parent / "static"
PAGE = 100  # episodes per page
GROUP_PAGE = 40  # groups per page
# what a run folder holds one of, whichever engine wrote it
_RUN_MARKS = ("config.yaml", "metrics.jsonl", "tokens", "trajectories", "eval")


@dataclass
class Served:
    run: Run
    tokenizer: RunTokenizer
    drift: DriftCount


def check_run_dirs(paths: list[str]) -> list[Path]:
    """The folders to serve, refused before any server starts when one is not a run folder."""
    if not paths:
        raise ConfigError("aworld-train view needs at least one run folder (RUN_DIR)")
    out = []
    for given in paths:
        path = Path(given).expanduser()
        if not path.is_dir():
            raise ConfigError(
                f"RUN_DIR {given!r} is not a folder: pass a run folder (trainer.run_dir of a run)"
            )
        if not any((path / mark).exists() for mark in _RUN_MARKS):
            raise ConfigError(
                f"RUN_DIR {given!r} is not a run folder: it holds none of {', '.join(_RUN_MARKS)}; "
                "pass the trainer.run_dir of a run"
            )
        out.append(path)
    return out


def _number(value: str | None) -> float | None:
    return float(value) if value not in (None, "") else None


def _filters(q) -> Filters:
    """The episode list's filters from its query string."""
    return Filters(
        status=q.get("status", ""),
        reward_min=_number(q.get("reward_min")),
        reward_max=_number(q.get("reward_max")),
        agent=q.get("agent", ""),
        tool=q.get("tool", ""),
        text=q.get("q", ""),
    )


def _served_run(served: list[Served], index: int) -> Served:
    if not 0 <= index < len(served):
        raise KeyError(f"no run {index}")
    return served[index]


def _page(request: Request) -> FileResponse:
    return FileResponse(STATIC / "index.html")


async def _not_found(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"error": str(exc.args[0]) if exc.args else str(exc)}, status_code=404)


def build_app(run_dirs: list[Path]) -> Starlette:
    served = []
    for path in run_dirs:
        run = Run(path)
        tokenizer = RunTokenizer(run)
        served.append(Served(run, tokenizer, DriftCount(run, tokenizer)))

    def pick(request: Request) -> Served:
        return _served_run(served, int(request.path_params["run"]))

    def runs(request: Request) -> JSONResponse:
        return JSONResponse(
            [{"index": i, "name": s.run.name, "path": str(s.run.path)} for i, s in enumerate(served)]
        )

    def overview(request: Request) -> JSONResponse:
        return JSONResponse(run_overview(pick(request).run))

    def episodes(request: Request) -> JSONResponse:
        s, q = pick(request), request.query_params
        s.tokenizer.warm()  # loaded while the user reads the list, not when they open an episode
        page = episodes_page(s.run, q["set"], _filters(q), int(q.get("offset", 0)), limit=PAGE)
        return JSONResponse(page)

    def groups(request: Request) -> JSONResponse:
        s, q = pick(request), request.query_params
        s.tokenizer.warm()
        return JSONResponse(groups_page(s.run, q["set"], int(q.get("offset", 0)), GROUP_PAGE))

    def episode(request: Request) -> JSONResponse:
        s, q = pick(request), request.query_params
        return JSONResponse(episode_view(s.run, s.tokenizer, q["set"], q["id"]))

    def drift(request: Request) -> JSONResponse:
        s, q = pick(request), request.query_params
        return JSONResponse(drift_view(s.run, s.tokenizer, q["set"], q["id"]))

    def drift_count(request: Request) -> JSONResponse:
        return JSONResponse(pick(request).drift.summary(start=request.query_params.get("start") == "1"))

    def compare(request: Request) -> JSONResponse:
        q = request.query_params
        run_a, name_a = q["a"].split(":", 1)
        run_b, name_b = q["b"].split(":", 1)
        a, b = served[int(run_a)].run, served[int(run_b)].run
        return JSONResponse(compare_sets(a, name_a, b, name_b))

    routes = [
        Route("/", _page),
        Route("/api/runs", runs),
        Route("/api/runs/{run:int}", overview),
        Route("/api/runs/{run:int}/episodes", episodes),
        Route("/api/runs/{run:int}/groups", groups),
        Route("/api/runs/{run:int}/episode", episode),
        Route("/api/runs/{run:int}/drift", drift),
        Route("/api/runs/{run:int}/drift-count", drift_count),
        Route("/api/compare", compare),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Starlette(routes=routes, exception_handlers={KeyError: _not_found})


def serve(run_dirs: list[str], host: str = "127.0.0.1", port: int = 8765) -> None:
    """Serve the page until interrupted; the URL is printed once the server listens."""
    import socket

    import uvicorn

    paths = check_run_dirs(run_dirs)
    app = build_app(paths)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        raise ConfigError(
            f"--host {host} --port {port}: cannot listen there ({exc}); pick another --port"
        ) from None
    sock.listen(128)
    shown = f"[{host}]" if ":" in host else host
    print(
        f"aworld-train view: http://{shown}:{sock.getsockname()[1]}/  ({len(paths)} run folder(s); Ctrl-C stops)",
        flush=True,
    )
    config = uvicorn.Config(app, log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])
