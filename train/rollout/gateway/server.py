"""The gateway's HTTP server: one session per episode, serving OpenAI's chat and text completions
(`openai_api.py`), OpenAI's Responses API (`responses_api.py`) and Anthropic's Messages API
(`messages_api.py`).

One gateway per process and listening address, on a thread of its own with its own event loop, so
that it outlives the event loop of any one batch (the local backend runs each batch under its own
`asyncio.run`) and serves the episodes of every loop in the process. A session is an episode's
agent seen from outside: its base URL (`http://HOST:PORT/sessions/<id>/v1`, the id unguessable;
Anthropic's SDK takes it without the `/v1`) and its token (`Authorization: Bearer <token>`, or
Anthropic's `x-api-key: <token>`). A request of any of the APIs becomes the same chat call (chat
messages, tools, `CallOptions`) and runs the episode's own `complete` on the episode's event loop,
the one code path our in-process AWorld provider also calls, so all keep the ledger the same way;
the episode refuses (`check_call`) what it cannot honour before anything is sampled.

Every request is answered within a bounded time: a body over MAX_BODY_BYTES is refused (413) by
Starlette's own limit, from its Content-Length before it is read (Starlette's plain-text answer),
or as soon as a chunked body runs over (our JSON answer); a body that does not arrive
within BODY_TIMEOUT_S is refused (408: uvicorn bounds the wait between requests, not a body's);
a prompt that cannot fit the run's token budget is refused (413) before it is tokenized; a call
of an episode that ends is answered 410 naming how it ended, and one of a session that ended 404.
An unknown path is answered 404 and a wrong method 405, naming the endpoints a session serves.
Errors are in OpenAI's shape, on `/messages` in Anthropic's. A session answers as one model, its
agent's name (`Session.model`), which `GET /models` lists; any name a request gives is accepted.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import secrets
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aworld_train.rollout.episodes.driver import CallRefused, LLMEndpoint
from aworld_train.rollout.gateway import openai_answers, openai_api, refusals
from aworld_train.rollout.gateway.addresses import advertised_host, host_in_url
from aworld_train.rollout.gateway.conversations import Conversations
from aworld_train.rollout.gateway.errors import HTTPError, error_response, error_shape
from aworld_train.rollout.gateway.event_streams import chunk_stream, event_stream
from aworld_train.rollout.gateway.openai_api import ChatRequest, CompletionRequest, RewardReport
from aworld_train.rollout.gateway.refusals import RequestError

# The largest request body: room for a 128k-token conversation as JSON; the run's token budget
# bounds a prompt far more tightly, before tokenizing (Episode.check_call).
MAX_BODY_BYTES = 8 * 2**20
BODY_TIMEOUT_S = 30.0
# what a session serves, under its base URL
ENDPOINTS = (
    "POST /chat/completions",
    "POST /completions",
    "POST /responses",
    "POST /messages",
    "GET /models",
    "POST /reward",
)


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
    conversations: Conversations = field(default_factory=Conversations)  # for previous_response_id
    closed: bool = False
    # registering a call and closing the session exclude each other: they run on different threads
    # (the gateway's, the episode's), and a call registered after the close would never be answered
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False)

    async def run(self, coro: Coroutine) -> Any:
        """`coro` on the episode's loop; SessionEnded if the episode ends before it returns."""
        with self._guard:
            try:
                if self.closed:
                    raise SessionEnded
                future = asyncio.run_coroutine_threadsafe(coro, self.loop)
            except (SessionEnded, RuntimeError):  # RuntimeError: the episode's loop is closed
                coro.close()
                raise SessionEnded from None
            self.calls.add(future)
        try:
            return await asyncio.wrap_future(future)
        except (asyncio.CancelledError, concurrent.futures.CancelledError):
            if self.closed:
                raise SessionEnded from None
            raise
        finally:
            self.calls.discard(future)

    @property
    def model(self) -> str:
        """The one model name the session answers as: its agent's, the `model` its turns hand the
        agent (ProcessAgent); any name a request gives is answered by the same policy."""
        return self.agent or openai_api.MODEL

    def end_message(self) -> str | None:
        """Why no call is answered any more (the episode's status and error, as its record has
        them), or None while the episode runs."""
        ended = self.endpoint.ended()
        if ended is None:
            return "the episode ended; no more calls are answered" if self.closed else None
        status, error = ended
        return (
            f"the episode ended as {status}"
            + (f": {error}" if error else "")
            + "; no more calls are answered"
        )

    def close(self) -> None:
        """No call is registered after this; those in flight are cancelled (answered 410)."""
        with self._guard:
            self.closed = True
            calls = list(self.calls)
        for call in calls:
            call.cancel()


class Gateway:
    """A gateway server (`gateway()` gives the process's, one per listening address): sessions
    opened and closed by episodes. `url_host` names the host in the sessions' base URLs."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        url_host: str | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        body_timeout_s: float = BODY_TIMEOUT_S,
    ) -> None:
        self.sessions: dict[str, Session] = {}
        self.max_body_bytes, self.body_timeout_s = max_body_bytes, body_timeout_s
        self.loop = asyncio.new_event_loop()
        self._server = uvicorn.Server(
            uvicorn.Config(self._app(), host=host, port=port, log_level="warning", lifespan="off")
        )
        self._thread = threading.Thread(target=self._serve, name="aworld-train-gateway", daemon=True)
        self._ready = threading.Event()
        self._thread.start()
        if not self._ready.wait(30) or not self._server.started:
            raise RuntimeError(f"the gateway did not start on {host}:{port}")
        self.host, self.port = host, self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://{host_in_url(url_host or advertised_host(host))}:{self.port}"

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
        self.sessions.pop(session.id, None)
        session.close()

    # -- HTTP -------------------------------------------------------------------------------
    def _app(self) -> Starlette:
        return Starlette(
            max_body_size=self.max_body_bytes,  # refused from Content-Length before any of it is read
            exception_handlers={413: self._too_large, 404: self._no_route, 405: self._no_route},
            routes=[
                Route("/health", lambda _: JSONResponse({"ok": True, "sessions": len(self.sessions)})),
                Route("/sessions/{sid}/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/sessions/{sid}/v1/completions", self._completions, methods=["POST"]),
                Route("/sessions/{sid}/v1/responses", self._responses, methods=["POST"]),
                Route("/sessions/{sid}/v1/messages", self._messages, methods=["POST"]),
                Route("/sessions/{sid}/v1/models", self._models, methods=["GET"]),
                Route("/sessions/{sid}/v1/reward", self._reward, methods=["POST"]),
            ],
        )

    def _session(self, request: Request) -> Session:
        session = self.sessions.get(request.path_params["sid"])
        if session is None:
            raise HTTPError(404, "no such session: it ended, or it never existed", "not_found_error")
        # OpenAI's SDKs send a bearer token, Anthropic's an x-api-key
        scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
        token = bearer if scheme.lower() == "bearer" else request.headers.get("x-api-key", "")
        if not secrets.compare_digest(token.encode(), session.token.encode()):
            raise HTTPError(
                401,
                "give the session's token as 'Authorization: Bearer <token>' (or 'x-api-key: <token>')",
                "authentication_error",
            )
        return session

    async def _too_large(self, request: Request, exc: Exception) -> Response:
        message = (
            f"the request body is over {self.max_body_bytes} bytes, more than any prompt of the run "
            "can hold: shorten the conversation"
        )
        return error_response(error_shape(request), 413, message, "request_too_large")

    async def _no_route(self, request: Request, exc: HTTPException) -> Response:
        served = ", ".join(ENDPOINTS)
        what = "no such endpoint" if exc.status_code == 404 else "the endpoint does not take this method"
        message = (
            f"{what}: {request.method} {request.url.path}. A session's base URL "
            f"(http://HOST:PORT/sessions/<id>/v1) serves {served}"
        )
        kind = "not_found_error" if exc.status_code == 404 else "method_not_allowed"
        return error_response(error_shape(request), exc.status_code, message, kind, headers=exc.headers)

    async def _answer(
        self, request: Request, handle, error_body=openai_api.error_body, params: dict[str, str] | None = None
    ) -> Response:
        """`handle(session, body)`'s answer, or the error (in `error_body`'s shape) it ran into; the
        episode's refusals name a chat completion's parameters, renamed by `params`."""
        try:
            session = self._session(request)
            if session.end_message() is not None:  # ended, its session not yet closed
                raise SessionEnded
            try:
                raw = await asyncio.wait_for(request.body(), self.body_timeout_s)
            except asyncio.TimeoutError:
                raise HTTPError(
                    408, f"the request body did not arrive within {self.body_timeout_s:g}s", "timeout"
                ) from None
            return await handle(session, refusals.read_json(raw))
        except HTTPError as exc:
            return error_response(error_body, exc.status, exc.message, exc.kind)
        except RequestError as exc:
            return error_response(error_body, 400, str(exc), "invalid_request_error", exc.param)
        except CallRefused as exc:
            param = (params or {}).get(exc.param, exc.param)
            return error_response(error_body, exc.status, str(exc), exc.kind, param)
        except SessionEnded:
            return error_response(
                error_body, 410, session.end_message() or "the episode ended", "episode_ended"
            )
        except ClientDisconnect:
            return Response(status_code=400)  # nobody reads it

    async def _chat(self, request: Request) -> Response:
        async def handle(session: Session, body: Any) -> Response:
            req: ChatRequest = _request(ChatRequest, body, session)
            options = req.options()
            session.endpoint.check_call(
                session.agent, messages=req.messages, tools=req.tools, options=options
            )
            reply = await session.run(
                session.endpoint.complete(req.messages, req.tools, session.agent, options)
            )
            if not req.stream:
                return JSONResponse(openai_answers.chat_completion(reply, req.model))
            return chunk_stream(openai_answers.chat_chunks(reply, req.model, req.include_usage))

        return await self._answer(request, handle)

    async def _completions(self, request: Request) -> Response:
        async def handle(session: Session, body: Any) -> Response:
            req: CompletionRequest = _request(CompletionRequest, body, session)
            if req.stream:
                raise RequestError("stream: text completions are answered whole; leave it out", "stream")
            options = req.options()
            session.endpoint.check_call(session.agent, prompt=req.prompt, options=options)
            replies = await session.run(session.endpoint.complete_text(req.prompt, session.agent, options))
            return JSONResponse(openai_answers.text_completion(replies, req.model))

        return await self._answer(request, handle)

    async def _responses(self, request: Request) -> Response:
        # imported on first use: the SDK's types take a while to import, and most runs never call this
        from aworld_train.rollout.gateway import responses_answer, responses_api

        async def handle(session: Session, body: Any) -> Response:
            req: responses_api.ResponsesRequest = _request(responses_api.ResponsesRequest, body, session)
            messages, tools, options = req.messages(session.conversations), req.chat_tools, req.options()
            session.endpoint.check_call(session.agent, messages=messages, tools=tools, options=options)
            reply = await session.run(session.endpoint.complete(messages, tools, session.agent, options))
            response = responses_answer.response(reply, req)
            kept = responses_answer.kept_messages(reply, req)
            session.conversations.keep(response.id, req.previous_response_id, kept)
            if not req.stream:
                return JSONResponse(responses_answer.dump(response))
            return event_stream(list(responses_answer.events(response, reply, req)))

        return await self._answer(request, handle, params=responses_api.PARAMS)

    async def _messages(self, request: Request) -> Response:
        # imported on first use: the SDK's types take a while to import, and most runs never call this
        from aworld_train.rollout.gateway import messages_answer, messages_api

        async def handle(session: Session, body: Any) -> Response:
            req: messages_api.MessagesRequest = _request(messages_api.MessagesRequest, body, session)
            messages, tools, options = req.chat_messages, req.chat_tools, req.options()
            session.endpoint.check_call(session.agent, messages=messages, tools=tools, options=options)
            reply = await session.run(session.endpoint.complete(messages, tools, session.agent, options))
            message = messages_answer.message(reply, req.model)
            if not req.stream:
                return JSONResponse(messages_answer.dump(message))
            return event_stream(list(messages_answer.events(message)))

        return await self._answer(request, handle, messages_api.error_body, messages_api.PARAMS)

    async def _models(self, request: Request) -> Response:
        try:
            session = self._session(request)
        except HTTPError as exc:
            return error_response(openai_api.error_body, exc.status, exc.message, exc.kind)
        model = {"id": session.model, "object": "model", "created": 0, "owned_by": "aworld-train"}
        return JSONResponse({"object": "list", "data": [model]})

    async def _reward(self, request: Request) -> Response:
        async def handle(session: Session, body: Any) -> Response:
            report_: RewardReport = refusals.parse(RewardReport, body)

            async def report() -> None:
                session.endpoint.report_reward(report_.reward, report_.extras)

            await session.run(report())
            return JSONResponse({"ok": True})

        return await self._answer(request, handle)


def _request(kind: type[refusals.ApiRequest], body: Any, session: Session) -> Any:
    """A request of `kind` from a JSON body; one naming no model answers as the session's."""
    req = refusals.parse(kind, body)
    req.model = req.model or session.model
    return req


_GATEWAYS: dict[tuple[str, str | None], Gateway] = {}
_LOCK = threading.Lock()


def _forget_in_child() -> None:
    """A forked process (a rollout worker) has no gateway thread: it starts its own."""
    global _GATEWAYS, _LOCK
    _GATEWAYS, _LOCK = {}, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


def gateway(host: str = "127.0.0.1", url_host: str | None = None) -> Gateway:
    """This process's gateway on `host` (loopback by default), started on first use. Each listening
    address has a gateway of its own: a session asked for on loopback never gets a wide one."""
    with _LOCK:
        key = (host, url_host)
        if key not in _GATEWAYS:
            _GATEWAYS[key] = Gateway(host, url_host=url_host)
        return _GATEWAYS[key]
