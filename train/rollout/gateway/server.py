"""The gateway's HTTP server: OpenAI's chat and text completions, one session per episode.

One gateway per process, on a thread of its own with its own event loop, so that it outlives
the event loop of any one batch (the local backend runs each batch under its own `asyncio.run`)
and serves the episodes of every loop in the process. A session is an episode's agent seen from
outside: its base URL (`http://HOST:PORT/sessions/<id>/v1`, the id unguessable) and its bearer
token. A request runs the episode's own `complete` on the episode's event loop, the one code
path our in-process AWorld provider also calls, so both keep the ledger the same way.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import secrets
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from aworld_train.rollout.driver import LLMEndpoint
from aworld_train.rollout.gateway import openai_api
from aworld_train.rollout.gateway.openai_api import ChatRequest, CompletionRequest, RequestError


class SessionEnded(Exception):
    pass


@dataclass
class Session:
    """One episode's agent, as the gateway serves it."""

    id: str
    token: str
    endpoint: LLMEndpoint  # the episode
    loop: asyncio.AbstractEventLoop  # the episode's event loop
    agent: str = ""
    base_url: str = ""
    calls: set[concurrent.futures.Future] = field(default_factory=set)  # in flight on the episode's loop
    closed: bool = False

    async def run(self, coro: Coroutine) -> Any:
        """`coro` on the episode's loop; SessionEnded if the episode ends before it returns."""
        if self.closed:
            coro.close()
            raise SessionEnded
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        self.calls.add(future)
        try:
            return await asyncio.wrap_future(future)
        except (asyncio.CancelledError, concurrent.futures.CancelledError):
            if self.closed:
                raise SessionEnded from None
            raise
        finally:
            self.calls.discard(future)


class Gateway:
    """The process's gateway server (`gateway()` gives it): sessions opened and closed by episodes."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.sessions: dict[str, Session] = {}
        self.loop = asyncio.new_event_loop()
        self._server = uvicorn.Server(
            uvicorn.Config(self._app(), host=host, port=port, log_level="warning", lifespan="off")
        )
        self._thread = threading.Thread(target=self._serve, name="aworld-train-gateway", daemon=True)
        self._ready = threading.Event()
        self._thread.start()
        if not self._ready.wait(30) or not self._server.started:
            raise RuntimeError(f"the gateway did not start on {host}:{port}")
        bound_host, bound_port = self._server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host if host not in ('0.0.0.0', '::') else bound_host}:{bound_port}"

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def serve() -> None:
            task = asyncio.ensure_future(self._server.serve())
            while not self._server.started and not task.done():
                await asyncio.sleep(0.01)
            self._ready.set()
            await task

        try:
            self.loop.run_until_complete(serve())
        finally:
            self._ready.set()

    def submit(self, coro: Coroutine) -> concurrent.futures.Future:
        """Run `coro` on the gateway's loop (the agent processes live there)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    # -- sessions ---------------------------------------------------------------------------
    def open(self, endpoint: LLMEndpoint, agent: str = "") -> Session:
        """A session for the episode `endpoint`, called from the episode's running loop."""
        session_id = secrets.token_urlsafe(16)
        session = Session(
            session_id, secrets.token_urlsafe(32), endpoint, asyncio.get_running_loop(), agent=agent
        )
        session.base_url = f"{self.url}/sessions/{session_id}/v1"
        self.sessions[session_id] = session
        return session

    def close(self, session: Session) -> None:
        """End the session: later requests get 404, calls in flight get 410."""
        session.closed = True
        self.sessions.pop(session.id, None)
        for call in list(session.calls):
            call.cancel()

    # -- HTTP -------------------------------------------------------------------------------
    def _app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/health", lambda _: JSONResponse({"ok": True, "sessions": len(self.sessions)})),
                Route("/sessions/{sid}/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/sessions/{sid}/v1/completions", self._completions, methods=["POST"]),
                Route("/sessions/{sid}/v1/models", self._models, methods=["GET"]),
                Route("/sessions/{sid}/v1/reward", self._reward, methods=["POST"]),
            ]
        )

    def _session(self, request: Request) -> Session:
        session = self.sessions.get(request.path_params["sid"])
        if session is None:
            raise _HTTPError(404, "no such session: it ended, or it never existed", "not_found_error")
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(token.encode(), session.token.encode()):
            raise _HTTPError(
                401, "give the session's token as 'Authorization: Bearer <token>'", "authentication_error"
            )
        return session

    async def _answer(self, request: Request, handle) -> Response:
        try:
            session = self._session(request)
            try:
                body = await request.json()
            except json.JSONDecodeError as exc:
                raise RequestError(f"the request body is not JSON: {exc}") from None
            return await handle(session, body)
        except _HTTPError as exc:
            return JSONResponse(openai_api.error_body(exc.message, exc.kind), exc.status)
        except RequestError as exc:
            return JSONResponse(openai_api.error_body(str(exc), param=exc.param), 400)
        except SessionEnded:
            return JSONResponse(
                openai_api.error_body("the episode ended: no more calls are answered", "episode_ended"), 410
            )

    async def _chat(self, request: Request) -> Response:
        async def handle(session: Session, body: Any) -> Response:
            req: ChatRequest = openai_api.parse(ChatRequest, body)
            reply = await session.run(
                session.endpoint.complete(req.messages, req.tools, session.agent, req.options())
            )
            if not req.stream:
                return JSONResponse(openai_api.chat_completion(reply, req.model))
            return _stream(openai_api.chat_chunks(reply, req.model, req.include_usage))

        return await self._answer(request, handle)

    async def _completions(self, request: Request) -> Response:
        async def handle(session: Session, body: Any) -> Response:
            req: CompletionRequest = openai_api.parse(CompletionRequest, body)
            if req.stream:
                raise RequestError("stream: text completions are answered whole; leave it out", "stream")
            replies = await session.run(
                session.endpoint.complete_text(req.prompt, session.agent, req.options())
            )
            return JSONResponse(openai_api.text_completion(replies, req.model))

        return await self._answer(request, handle)

    async def _models(self, request: Request) -> Response:
        try:
            self._session(request)
        except _HTTPError as exc:
            return JSONResponse(openai_api.error_body(exc.message, exc.kind), exc.status)
        model = {"id": openai_api.MODEL, "object": "model", "created": 0, "owned_by": "aworld-train"}
        return JSONResponse({"object": "list", "data": [model]})

    async def _reward(self, request: Request) -> Response:
        async def handle(session: Session, body: Any) -> Response:
            reward = body.get("reward") if isinstance(body, dict) else None
            if isinstance(reward, bool) or not isinstance(reward, int | float):
                raise RequestError('send {"reward": <number>, "extras": {...}}', "reward")
            extras = body.get("extras") or {}
            if not isinstance(extras, dict):
                raise RequestError("extras: give an object (or leave it out)", "extras")

            async def report() -> None:
                session.endpoint.report_reward(float(reward), extras)

            await session.run(report())
            return JSONResponse({"ok": True})

        return await self._answer(request, handle)


class _HTTPError(Exception):
    def __init__(self, status: int, message: str, kind: str) -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def _stream(chunks: list[dict[str, Any]]) -> StreamingResponse:
    async def events():
        for chunk in chunks:
            yield f"data: {json.dumps(chunk)}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


_GATEWAY: Gateway | None = None
_LOCK = threading.Lock()


def _forget_in_child() -> None:
    """A forked process (a rollout worker) has no gateway thread: it starts its own."""
    global _GATEWAY, _LOCK
    _GATEWAY, _LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


def gateway(host: str = "127.0.0.1") -> Gateway:
    """This process's gateway, started on first use (bound to `host`, loopback by default)."""
    global _GATEWAY
    with _LOCK:
        if _GATEWAY is None:
            _GATEWAY = Gateway(host)
        return _GATEWAY
