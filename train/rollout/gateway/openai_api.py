"""OpenAI's chat and text completion requests, as the gateway reads them, and OpenAI's error shape.

A request is checked field by field before any policy call (`refusals.py`), its messages and tools
against pydantic models of OpenAI's shapes, and a field the gateway cannot honour is refused with
its name, why and what to send (`field_rules.py`; a message without a role would break the
episode's chat template). A content part that is not text (an image, audio, a file) is refused:
the policy would answer without having seen it. `tool_choice`, `parallel_tool_calls` and
`response_format` become the call's `CallOptions`, which the episode honours or refuses
(`check_call`); `logit_bias`, the frequency and presence penalties and `top_logprobs` are refused:
the trainer computes each token's logprob under the policy alone, and knows only the sampled
token's. An episode's `Reply` becomes a `chat.completion`, or the chunks of a stream
(`openai_answers.py`).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

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
from aworld_train.rollout.gateway import field_rules
from aworld_train.rollout.gateway.refusals import ApiRequest, RequestError, first_error, not_text, refuse

# the model a session answers as where its agent has no name (GET /models, a request naming none)
MODEL = "aworld-train-policy"


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


class _ToolFunction(_Shape):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class _Tool(_Shape):
    type: Literal["function"]
    function: _ToolFunction


_MESSAGES = TypeAdapter(list[ChatMessage])
_TOOLS = TypeAdapter(list[_Tool] | None)


class _Request(ApiRequest):
    model: str | None = None  # None: the session's own name (Session.model)
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
        for name in ("logit_bias", "frequency_penalty", "presence_penalty"):
            if getattr(self, name):
                raise refuse(name, self.RULES[name])

    def stops(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    @property
    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


class ChatRequest(_Request):
    RULES: ClassVar = field_rules.CHAT

    messages: list[dict[str, Any]] = Field(min_length=1)  # checked as ChatMessage by `check`
    tools: list[dict[str, Any]] | None = None  # checked as OpenAI's function tools by `check`
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = None  # refused unless 0: only the sampled token's logprob is known
    _choice: tuple[str, str | None] = PrivateAttr(("auto", None))
    _schema: dict[str, Any] | None = PrivateAttr(None)

    def check(self) -> None:
        """Each message and tool against OpenAI's shapes (RequestError naming the first bad field);
        a `developer` message is the system message of OpenAI's newer models."""
        super().check()
        if self.top_logprobs:
            raise refuse("top_logprobs", field_rules.CHAT_TOP_LOGPROBS)
        try:
            _MESSAGES.validate_python(self.messages)
        except ValidationError as exc:
            raise first_error(exc, "messages") from None
        try:
            _TOOLS.validate_python(self.tools)
        except ValidationError as exc:
            raise first_error(exc, "tools") from None
        _text_only(self.messages)
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


def _text_only(messages: list[dict[str, Any]]) -> None:
    """RequestError for the first content part that is not text: the policy reads text only."""
    for i, message in enumerate(messages):
        content = message.get("content")
        for j, part in enumerate(content if isinstance(content, list) else []):
            kind = part.get("type")
            if kind != "text":
                raise not_text(f"messages.{i}.content.{j}.type", kind, "parts", "text parts")
            if not isinstance(part.get("text"), str):
                raise refuse(f"messages.{i}.content.{j}.text", "give the part's text")


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
    raise refuse("tool_choice", field_rules.CHAT_TOOL_CHOICE)


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
    raise refuse("response_format", field_rules.CHAT_RESPONSE_FORMAT)


class CompletionRequest(_Request):
    RULES: ClassVar = field_rules.COMPLETION

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
    RULES: ClassVar = field_rules.REWARD

    # a number only (strict: "0.5" and true are refused); NaN, Infinity and 1e309 (read as
    # infinity) are refused where they arrive
    reward: Annotated[FiniteFloat, Strict()]
    extras: dict[str, Any] = Field(default_factory=dict)


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}
