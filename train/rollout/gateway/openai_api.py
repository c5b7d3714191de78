"""OpenAI's chat and text completion shapes, as the gateway reads and writes them.

A request is checked field by field before any policy call, its messages and tools against
pydantic models of OpenAI's shapes, and a field the gateway cannot honour is refused with its name
(a silently ignored `tool_choice` would train a policy on prompts the agent never meant; a message
without a role would break the episode's chat template). An episode's `Reply` becomes a
`chat.completion`, or the chunks of a stream.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

import pydantic_core
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    FiniteFloat,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from aworld_train.rollout.episodes.driver import CallOptions, Reply

MODEL = "aworld-train-policy"


class RequestError(ValueError):
    """A request the gateway refuses: HTTP 400 in OpenAI's error shape, naming the field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class _Shape(BaseModel):
    # what OpenAI's API allows beyond the fields read here (name, refusal, ...) travels on as given
    model_config = ConfigDict(extra="allow")


Content = str | list[dict[str, Any]]  # text, or OpenAI's content parts


class _Function(_Shape):
    name: str
    arguments: str | dict[str, Any]


class _ToolCall(_Shape):
    id: str
    type: Literal["function"] = "function"
    function: _Function


class _SystemMessage(_Shape):
    role: Literal["system", "developer"]
    content: Content


class _UserMessage(_Shape):
    role: Literal["user"]
    content: Content


class _AssistantMessage(_Shape):
    role: Literal["assistant"]
    content: Content | None = None
    tool_calls: list[_ToolCall] | None = None


class _ToolMessage(_Shape):
    role: Literal["tool"]
    content: Content
    tool_call_id: str


ChatMessage = Annotated[
    _SystemMessage | _UserMessage | _AssistantMessage | _ToolMessage, Field(discriminator="role")
]
ROLES = ("system", "developer", "user", "assistant", "tool")


class _ToolFunction(_Shape):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class _Tool(_Shape):
    type: Literal["function"]
    function: _ToolFunction


_MESSAGES = TypeAdapter(list[ChatMessage])
_TOOLS = TypeAdapter(list[_Tool] | None)


class _Request(BaseModel):
    # clients send fields the gateway has no use for (user, metadata, frequency_penalty, ...)
    model_config = ConfigDict(extra="allow")

    model: str = MODEL
    n: int = Field(1, ge=1, le=16)
    stop: str | list[str] | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0)  # the run's temperature stands (CallOptions)
    top_p: float | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None

    @field_validator("stop")
    @classmethod
    def _at_most_four(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > 4:
            raise ValueError("give at most 4 stop strings")
        return value

    def stops(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    @property
    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


class ChatRequest(_Request):
    messages: list[dict[str, Any]] = Field(min_length=1)  # checked as ChatMessage by `parse`
    tools: list[dict[str, Any]] | None = None  # checked as OpenAI's function tools by `parse`
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=0)  # only the sampled token's logprob is known

    @field_validator("tool_choice")
    @classmethod
    def _policy_chooses(cls, value: str | dict | None) -> str | dict | None:
        if value not in (None, "auto"):
            raise ValueError(
                "only 'auto' (or leaving it out): the policy decides whether to call a tool, as it "
                "will when deployed; a forced choice would train on prompts the template never shows"
            )
        return value

    def check_shapes(self) -> None:
        """Each message and tool against OpenAI's shapes (RequestError naming the first bad field);
        a `developer` message is the system message of OpenAI's newer models."""
        try:
            _MESSAGES.validate_python(self.messages)
        except ValidationError as exc:
            raise _first_error(exc, "messages") from None
        try:
            _TOOLS.validate_python(self.tools)
        except ValidationError as exc:
            raise _first_error(exc, "tools") from None
        self.messages = [{**m, "role": "system"} if m["role"] == "developer" else m for m in self.messages]

    def options(self) -> CallOptions:
        return CallOptions(
            max_tokens=self.max_completion_tokens or self.max_tokens,
            stop=self.stops(),
            seed=self.seed,
            n=self.n,
            logprobs=self.logprobs,
        )


class CompletionRequest(_Request):
    prompt: str | list[int] = Field(description="text, or the prompt's token ids")
    max_tokens: int | None = Field(16, ge=1)
    logprobs: int | None = Field(None, ge=0, le=1)  # only the sampled token's logprob is known
    echo: Literal[False] = False

    def options(self) -> CallOptions:
        return CallOptions(
            max_tokens=self.max_tokens,
            stop=self.stops(),
            seed=self.seed,
            n=self.n,
            logprobs=bool(self.logprobs),
        )


class RewardReport(BaseModel):
    """`POST <base_url>/reward`: the reward an agent reports for its episode."""

    model_config = ConfigDict(extra="forbid")

    reward: FiniteFloat  # NaN, Infinity and 1e309 (read as infinity) are refused where they arrive
    extras: dict[str, Any] = Field(default_factory=dict)


# pydantic's JSON parser refuses nesting deeper than this (Python's json module raises
# RecursionError near 1000 instead); no OpenAI request nests nearly so deep
MAX_JSON_DEPTH = 200


def read_json(raw: bytes) -> Any:
    """A request body's JSON, or RequestError: not JSON, or nested deeper than MAX_JSON_DEPTH.
    NaN and Infinity (which Python's json writes) are read, and refused by the field they reach."""
    try:
        return pydantic_core.from_json(raw, allow_inf_nan=True)
    except ValueError as exc:
        if "recursion limit" in str(exc):
            raise RequestError(
                f"the request body nests deeper than {MAX_JSON_DEPTH} levels ({exc}): flatten it"
            ) from None
        raise RequestError(f"the request body is not JSON ({exc}): send one JSON object") from None


def parse(model: type[BaseModel], body: Any) -> Any:
    """A request of `model` from a JSON body, or RequestError naming the first bad field."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    try:
        request = model.model_validate(body)
    except ValidationError as exc:
        raise _first_error(exc) from None
    if isinstance(request, ChatRequest):
        request.check_shapes()
    return request


# what OpenAI's shape asks of a field that pydantic refused (its message says only what is wrong)
_SHAPE_FIXES = {
    "tool_calls": 'give a list of {"id", "type": "function", "function": {"name", "arguments"}}',
    "tool_call_id": "give the id of the call this result answers",
    "function": 'give {"name", "arguments"} (tools: {"name", "description", "parameters"})',
    "content": "give text, or a list of content parts",
}


def _first_error(exc: ValidationError, prefix: str | None = None) -> RequestError:
    """The first of pydantic's errors as a RequestError whose `param` is the field's dotted path
    (a message's role, which pydantic adds to the path of its fields, left out)."""
    first = exc.errors()[0]
    loc = [str(p) for p in first["loc"] if p not in ROLES]
    kind = first["type"]
    if kind in ("union_tag_not_found", "union_tag_invalid"):
        loc.append("role")
        got = first.get("input", {}).get("role") if isinstance(first.get("input"), dict) else None
        message = (
            f"{got!r} is not a role OpenAI's API knows" if got is not None else "every message needs a role"
        ) + f": use one of {', '.join(ROLES)}"
    else:
        hint = next((fix for name, fix in _SHAPE_FIXES.items() if name in loc), None)
        message = first["msg"] + (f": {hint}" if hint else "")
    field = ".".join([*([prefix] if prefix else []), *loc]) or None
    return RequestError(f"{field}: {message}" if field else message, field)


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


def _logprobs(reply: Reply) -> dict[str, Any] | None:
    if reply.logprobs is None:
        return None
    return {
        "content": [
            {"token": text, "logprob": lp, "bytes": list(text.encode()), "top_logprobs": []}
            for text, lp in reply.logprobs
        ]
    }


def _message(reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = reply.tool_calls
        message["content"] = reply.content or None  # as OpenAI answers a call without text
    return message


def _usage(replies: list[Reply]) -> dict[str, int]:
    prompt = replies[0].usage.get("prompt_tokens", 0)
    completion = sum(r.usage.get("completion_tokens", 0) for r in replies)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def chat_completion(reply: Reply, model: str) -> dict[str, Any]:
    replies = [reply, *reply.others]
    return {
        "id": f"chatcmpl-{reply.id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": k, "message": _message(r), "finish_reason": r.finish_reason, "logprobs": _logprobs(r)}
            for k, r in enumerate(replies)
        ],
        "usage": _usage(replies),
    }


def chat_chunks(reply: Reply, model: str, include_usage: bool) -> list[dict[str, Any]]:
    """The stream of one answer: per choice its role, its text, its tool calls (one chunk each, by
    index), its finish reason; then the usage if asked. The policy answers a call whole, so the
    stream carries the whole text at once."""
    head = {"id": f"chatcmpl-{reply.id}", "object": "chat.completion.chunk", "created": int(time.time())}
    head["model"] = model
    replies = [reply, *reply.others]

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None, logprobs=None) -> dict:
        choice = {"index": index, "delta": delta, "finish_reason": finish, "logprobs": logprobs}
        return {**head, "choices": [choice]}

    chunks = []
    for k, r in enumerate(replies):
        chunks.append(chunk(k, {"role": "assistant", "content": ""}))
        if r.content:
            chunks.append(chunk(k, {"content": r.content}, logprobs=_logprobs(r)))
        for i, call in enumerate(r.tool_calls):
            chunks.append(chunk(k, {"tool_calls": [{"index": i, **call}]}))
        chunks.append(chunk(k, {}, r.finish_reason))
    if include_usage:
        chunks.append({**head, "choices": [], "usage": _usage(replies)})
    return chunks


def text_completion(replies: list[Reply], model: str) -> dict[str, Any]:
    """A `text_completion` from a reply per choice."""
    return {
        "id": f"cmpl-{replies[0].id}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": k,
                "text": reply.content,
                "finish_reason": reply.finish_reason,
                "logprobs": None
                if reply.logprobs is None
                else {
                    "tokens": [t for t, _ in reply.logprobs],
                    "token_logprobs": [lp for _, lp in reply.logprobs],
                    "top_logprobs": None,
                    "text_offset": None,
                },
            }
            for k, reply in enumerate(replies)
        ],
        "usage": _usage(replies),
    }
