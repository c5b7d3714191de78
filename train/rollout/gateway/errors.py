"""The gateway's error answers, each in the shape of the API the request spoke."""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import JSONResponse

from aworld_train.rollout.gateway import openai_api


class HTTPError(Exception):
    """A request the gateway answers with `status` and its API's error shape."""

    def __init__(self, status: int, message: str, kind: str) -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


ErrorBody = Callable[..., dict]  # (message, kind, param) -> an API's error JSON


def error_response(
    error_body: ErrorBody,
    status: int,
    message: str,
    kind: str,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(error_body(message, kind, param), status, headers=headers)


def error_shape(request: Request) -> ErrorBody:
    """The error shape of the API a path belongs to: Anthropic's on /messages, else OpenAI's."""
    if request.url.path.rstrip("/").endswith("/v1/messages"):
        from aworld_train.rollout.gateway import messages_api

        return messages_api.error_body
    return openai_api.error_body
