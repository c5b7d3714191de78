"""OpenAI's chat and text completion shapes, as the gateway reads and writes them, and what every
served API shares: reading a body, refusing a field by name, OpenAI's error shape.

A request is checked field by field before any policy call, its messages and tools against
pydantic models of OpenAI's shapes, and a field the gateway cannot honour is refused with its name
(a silently ignored field would train a policy on prompts or samples the agent never meant; a
message without a role would break the episode's chat template). `tool_choice`,
`parallel_tool_calls` and `response_format` become the call's `CallOptions`, which the episode
honours or refuses (`check_call`); `logit_bias` and the frequency and presence penalties are
refused: the trainer computes each token's logprob under the policy alone. An episode's `Reply`
becomes a `chat.completion`, or the chunks of a stream.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pydantic_core
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    FiniteFloat,
    PrivateAttr,
    Strict,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from aworld_train.rollout.episodes.driver import CallOptions

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


class ApiRequest(BaseModel):
    """A request body of one of the served APIs: read by pydantic, then `check`ed."""

    # clients send fields the gateway has no use for (user, metadata, store, ...)
    model_config = ConfigDict(extra="allow")

    def check(self) -> None:
        """RequestError (naming the field and the fix) for what the fields' types alone let through."""


# why a request may not reweight the policy's distribution (logit_bias, penalties)
REWEIGHTING = (
    "the trainer computes each token's logprob under the policy alone, so a sample drawn under {what} "
    "would be another policy's: remove {name} (the run's rollout.temperature, top_p and top_k shape "
    "sampling)"
)


class _Request(ApiRequest):
    model: str = MODEL
    n: int = Field(1, ge=1, le=16)
    stop: str | list[str] | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0)  # the run's temperature stands (CallOptions)
    top_p: float | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    logit_bias: dict[str, float] | None = None  # refused unless empty
    frequency_penalty: float | None = None  # refused unless 0
    presence_penalty: float | None = None  # refused unless 0

    @field_validator("stop")
    @classmethod
    def _at_most_four(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > 4:
            raise ValueError("give at most 4 stop strings")
        return value

    def check(self) -> None:
        if self.logit_bias:
            raise RequestError(
                "logit_bias: " + REWEIGHTING.format(what="a bias", name="logit_bias"), "logit_bias"
            )
        for name in ("frequency_penalty", "presence_penalty"):
            if getattr(self, name):
                raise RequestError(f"{name}: " + REWEIGHTING.format(what="a penalty", name=name), name)

    def stops(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    @property
    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


class ChatRequest(_Request):
    messages: list[dict[str, Any]] = Field(min_length=1)  # checked as ChatMessage by `check`
    tools: list[dict[str, Any]] | None = None  # checked as OpenAI's function tools by `check`
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=0)  # only the sampled token's logprob is known
    _choice: tuple[str, str | None] = PrivateAttr(("auto", None))
    _schema: dict[str, Any] | None = PrivateAttr(None)

    def check(self) -> None:
        """Each message and tool against OpenAI's shapes (RequestError naming the first bad field);
        a `developer` message is the system message of OpenAI's newer models."""
        super().check()
        try:
            _MESSAGES.validate_python(self.messages)
        except ValidationError as exc:
            raise first_error(exc, "messages") from None
        try:
            _TOOLS.validate_python(self.tools)
        except ValidationError as exc:
            raise first_error(exc, "tools") from None
        self.messages = [{**m, "role": "system"} if m["role"] == "developer" else m for m in self.messages]
        self._choice = _chat_tool_choice(self.tool_choice, self.tools)
        self._schema = _chat_json_schema(self.response_format)

    def options(self) -> CallOptions:
        kind, name = self._choice
        return CallOptions(
            max_tokens=self.max_completion_tokens or self.max_tokens,
            stop=self.stops(),
            seed=self.seed,
            n=self.n,
            logprobs=self.logprobs,
            tool_choice=kind,
            tool_name=name,
            parallel_tool_calls=self.parallel_tool_calls is not False,
            json_schema=self._schema,
        )


def tool_names(tools: list[dict[str, Any]] | None) -> list[str]:
    """The names of chat tools (`{"type": "function", "function": {"name", ...}}`)."""
    return [t["function"]["name"] for t in tools or []]


def check_named_tool(name: str, tools: list[dict[str, Any]] | None, param: str) -> None:
    """RequestError naming `param` unless `name` is one of the chat `tools`."""
    names = tool_names(tools)
    if name not in names:
        offered = ", ".join(repr(n) for n in names) or "none"
        raise RequestError(
            f"{param}: the tool {name!r} is not among the request's tools ({offered}): name one of them",
            param,
        )


def _chat_tool_choice(
    value: str | dict[str, Any] | None, tools: list[dict[str, Any]] | None
) -> tuple[str, str | None]:
    """(CallOptions.tool_choice, tool_name) of a chat request's `tool_choice`."""
    if value is None:
        return "auto", None
    if value in ("auto", "none", "required"):
        return value, None
    function = value.get("function") if isinstance(value, dict) and value.get("type") == "function" else None
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        check_named_tool(function["name"], tools, "tool_choice")
        return "function", function["name"]
    raise RequestError(
        'tool_choice: give "auto", "none", "required" or {"type": "function", "function": {"name": ...}}',
        "tool_choice",
    )


def _chat_json_schema(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """The JSON schema a chat request's `response_format` asks the answer to follow, or None."""
    kind = None if value is None else value.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        schema = (value.get("json_schema") or {}).get("schema")
        if isinstance(schema, dict):
            return schema
        raise RequestError(
            "response_format.json_schema.schema: give the JSON schema the answer must follow",
            "response_format.json_schema.schema",
        )
    raise RequestError(
        'response_format: give {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", '
        '"json_schema": {"name": ..., "schema": {...}}}',
        "response_format",
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

    # a number only (strict: "0.5" and true are refused); NaN, Infinity and 1e309 (read as
    # infinity) are refused where they arrive
    reward: Annotated[FiniteFloat, Strict()]
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
        raise first_error(exc) from None
    if isinstance(request, ApiRequest):
        request.check()
    return request


# what OpenAI's shape asks of a field that pydantic refused (its message says only what is wrong)
_SHAPE_FIXES = {
    "tool_calls": 'give a list of {"id", "type": "function", "function": {"name", "arguments"}}',
    "tool_call_id": "give the id of the call this result answers",
    "function": 'give {"name", "arguments"} (tools: {"name", "description", "parameters"})',
    "content": "give text, or a list of content parts",
    "reward": 'send a number: {"reward": 1.0, "extras": {...}}',
}


def first_error(exc: ValidationError, prefix: str | None = None) -> RequestError:
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
