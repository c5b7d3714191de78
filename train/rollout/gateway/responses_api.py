"""OpenAI's Responses API (`POST /responses`) on the episode's chat calls.

A request becomes the chat messages and tools a chat completion would carry, so an agent on the
Responses API keeps the same token ledger as one on chat completions: `instructions` is the system
message; `input` is text (a user message) or items: messages (user, system, developer, assistant;
text or `input_text`/`output_text` parts), `function_call` items (the tool calls of the assistant
turn they follow), `function_call_output` items (tool messages); `reasoning` items are dropped (the
policy's turns are sampled whole, in their text). `previous_response_id` continues a response this
session made (`conversations.py`). `tool_choice`, `parallel_tool_calls`, `max_output_tokens`,
`text.format` and the `message.output_text.logprobs` include become the call's `CallOptions`.

What the gateway cannot honour is refused with 400 naming the field: tools OpenAI hosts (web
search, file search, ...), `background`, OpenAI's stored `conversation` and `prompt`,
`truncation: auto`, `context_management`, includes of hosted tools' outputs, `top_logprobs`, images
and files. Ignored on purpose: `temperature` and `top_p` (the run's stand: the trainer computes
its logprobs under them), `store` (the session keeps its responses either way), `reasoning`,
`text.verbosity`, a function tool's `strict` (the arguments are what the policy sampled),
`metadata`, `user`, `safety_identifier`, `prompt_cache_key`, `service_tier`, `max_tool_calls`.

The answer is the SDK's own `Response` and, for `stream: true`, its events (responses_answer.py).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, NoReturn

from openai.types.responses import (
    FunctionTool,
    ResponseFormatTextJSONSchemaConfig,
    ToolChoiceFunction,
)
from openai.types.shared import ResponseFormatJSONObject, ResponseFormatText
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from aworld_train.rollout.episodes.driver import CallOptions
from aworld_train.rollout.gateway import field_rules
from aworld_train.rollout.gateway.conversations import Conversations
from aworld_train.rollout.gateway.openai_api import check_named_tool
from aworld_train.rollout.gateway.refusals import ApiRequest, first_error, not_text, refuse

# the episode names a chat completion's parameters when it refuses a call: here they are these
PARAMS = {"response_format": "text.format"}

_HONOURED_INCLUDES = ("message.output_text.logprobs",)
# nothing of them is ever produced: no reasoning item leaves the gateway
_EMPTY_INCLUDES = ("reasoning.encrypted_content",)
_TEXT_PARTS = ("input_text", "output_text")
_FORMATS = {
    "text": ResponseFormatText,
    "json_object": ResponseFormatJSONObject,
    "json_schema": ResponseFormatTextJSONSchemaConfig,
}


class _Item(BaseModel):
    # what else an item carries (id, status, annotations, ...) is not read
    model_config = ConfigDict(extra="allow")


class _MessageItem(_Item):
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[Any]


class _FunctionCallItem(_Item):
    call_id: str
    name: str
    arguments: str


class _FunctionCallOutputItem(_Item):
    call_id: str
    output: str | list[Any]


class ResponsesRequest(ApiRequest):
    """`POST /responses`: the fields read; `check` turns them into a chat call."""

    RULES: ClassVar = field_rules.RESPONSES

    model: str | None = None  # None: the session's own name (Session.model)
    input: str | list[Any]
    instructions: str | None = None
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    text: dict[str, Any] | None = None
    temperature: float | None = Field(None, ge=0)  # the run's temperature stands
    top_p: float | None = None
    top_logprobs: int | None = None
    previous_response_id: str | None = None
    store: bool | None = None
    include: list[str] | None = None
    stream: bool = False
    background: bool | None = None
    truncation: str | None = None
    conversation: Any = None
    prompt: Any = None
    context_management: Any = None

    _messages: list[dict[str, Any]] = PrivateAttr(default_factory=list)
    _function_tools: list[FunctionTool] = PrivateAttr(default_factory=list)
    _choice: tuple[str, str | None] = PrivateAttr(("auto", None))
    _format: BaseModel | None = PrivateAttr(None)

    def check(self) -> None:
        self._refuse_unserved()
        self._messages = input_messages(self.input)
        self._function_tools = [_function_tool(tool, f"tools.{i}") for i, tool in enumerate(self.tools or [])]
        self._choice = self._tool_choice()
        self._format = self._text_format()

    def _refuse_unserved(self) -> None:
        if self.background:
            _refuse(
                "background",
                "each call is answered while the agent waits, on the episode's clock: leave background out",
            )
        for name, stored in (("conversation", "conversations"), ("prompt", "prompt templates")):
            if getattr(self, name) is not None:
                _refuse(
                    name,
                    f"OpenAI's stored {stored} are not kept here: send the instructions and input items "
                    "(or continue a response of this session with previous_response_id)",
                )
        if self.truncation not in (None, "disabled"):
            _refuse(
                "truncation",
                "the gateway never drops input items: a conversation over the run's token budget is "
                "refused (413); leave truncation out, or 'disabled'",
            )
        if self.context_management is not None:
            _refuse(
                "context_management",
                "the gateway never compacts a conversation: leave it out (an agent may summarise its "
                "own history)",
            )
        if self.top_logprobs:
            _refuse("top_logprobs", field_rules.RESPONSES_TOP_LOGPROBS)
        for i, value in enumerate(self.include or []):
            if value not in (*_HONOURED_INCLUDES, *_EMPTY_INCLUDES):
                _refuse(
                    f"include.{i}",
                    f"{value!r} is an output of tools OpenAI hosts, which the gateway does not run: "
                    f"leave it out (served: {', '.join(_HONOURED_INCLUDES + _EMPTY_INCLUDES)})",
                )

    def _tool_choice(self) -> tuple[str, str | None]:
        value = self.tool_choice
        if value is None:
            return "auto", None
        if value in ("auto", "none", "required"):
            return value, None
        if isinstance(value, dict) and value.get("type") == "function":
            try:
                name = ToolChoiceFunction.model_validate(value).name
            except ValidationError as exc:
                raise first_error(exc, "tool_choice") from None
            check_named_tool(name, self.chat_tools, "tool_choice")
            return "function", name
        _refuse(
            "tool_choice",
            'give "auto", "none", "required" or {"type": "function", "name": ...}: the gateway serves '
            "function tools only",
        )

    def _text_format(self) -> BaseModel | None:
        value = (self.text or {}).get("format")
        if value is None:
            return None
        kind = value.get("type") if isinstance(value, dict) else None
        if kind not in _FORMATS:
            _refuse(
                "text.format.type",
                "give 'text', 'json_object' or 'json_schema' (with its name and schema)",
            )
        try:
            return _FORMATS[kind].model_validate(value)
        except ValidationError as exc:
            raise first_error(exc, "text.format") from None

    # -- what check() read ------------------------------------------------------------------
    @property
    def choice(self) -> tuple[str, str | None]:
        """(CallOptions.tool_choice, tool_name)."""
        return self._choice

    @property
    def function_tools(self) -> list[FunctionTool]:
        return self._function_tools

    @property
    def text_format(self) -> BaseModel | None:
        return self._format

    # -- the chat call ----------------------------------------------------------------------
    @property
    def chat_tools(self) -> list[dict[str, Any]] | None:
        if not self._function_tools:
            return None
        return [
            {
                "type": "function",
                "function": {
                    k: v
                    for k, v in (
                        ("name", t.name),
                        ("description", t.description),
                        ("parameters", t.parameters),
                    )
                    if v is not None
                },
            }
            for t in self._function_tools
        ]

    @property
    def input_messages(self) -> list[dict[str, Any]]:
        """This request's input items as chat messages."""
        return self._messages

    def messages(self, conversations: Conversations) -> list[dict[str, Any]]:
        """The whole chat conversation: the instructions, the conversation `previous_response_id`
        continues, then this request's input."""
        history: list[dict[str, Any]] = []
        if self.previous_response_id is not None:
            if self.previous_response_id not in conversations:
                _refuse(
                    "previous_response_id",
                    f"no response {self.previous_response_id!r} was made in this session (responses are "
                    "kept for their episode only): give an id this session answered with, or send the "
                    "whole conversation as input",
                )
            history = conversations.history(self.previous_response_id)
        system = [{"role": "system", "content": self.instructions}] if self.instructions else []
        return [*system, *history, *self._messages]

    def options(self) -> CallOptions:
        kind, name = self._choice
        return CallOptions(
            max_tokens=self.max_output_tokens,
            logprobs="message.output_text.logprobs" in (self.include or []),
            tool_choice=kind,
            tool_name=name,
            parallel_tool_calls=self.parallel_tool_calls is not False,
            json_schema=_json_schema(self._format),
        )


def _refuse(param: str, fix: str) -> NoReturn:
    raise refuse(param, fix)


def _function_tool(tool: Any, where: str) -> FunctionTool:
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind != "function":
        _refuse(
            f"{where}.type",
            f"{kind!r} tools are not served here (OpenAI runs them on its side): give the agent a "
            "function tool that does the same",
        )
    if tool.get("defer_loading"):
        _refuse(f"{where}.defer_loading", "the policy sees every tool in its prompt: leave defer_loading out")
    try:
        return FunctionTool.model_validate(tool)
    except ValidationError as exc:
        raise first_error(exc, where) from None


def _json_schema(fmt: BaseModel | None) -> dict[str, Any] | None:
    if isinstance(fmt, ResponseFormatJSONObject):
        return {"type": "object"}
    if isinstance(fmt, ResponseFormatTextJSONSchemaConfig):
        return dict(fmt.schema_)
    return None


def input_messages(value: str | list[Any]) -> list[dict[str, Any]]:
    """A request's `input` as chat messages (RequestError naming the first item it cannot read)."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        where = f"input.{i}"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message":
            message = _read(_MessageItem, item, where)
            role = "system" if message.role == "developer" else message.role
            messages.append({"role": role, "content": _text(message.content, f"{where}.content")})
        elif kind == "function_call":
            call = _read(_FunctionCallItem, item, where)
            tool_call = {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            if messages and messages[-1]["role"] == "assistant":  # the turn the call belongs to
                turn = messages[-1]
                turn["tool_calls"] = [*turn.get("tool_calls", []), tool_call]
                turn["content"] = turn["content"] or None
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [tool_call]})
        elif kind == "function_call_output":
            output = _read(_FunctionCallOutputItem, item, where)
            content = _text(output.output, f"{where}.output")
            messages.append({"role": "tool", "tool_call_id": output.call_id, "content": content})
        elif kind == "reasoning":
            continue  # the policy's own turns hold their reasoning as it was sampled
        elif kind == "item_reference":
            _refuse(
                f"{where}.type",
                "an item_reference points into OpenAI's stored items, which are not kept here: send the "
                "item itself (or continue a response of this session with previous_response_id)",
            )
        else:
            _refuse(
                f"{where}.type",
                f"{kind!r} items are not served: give messages, function_call, function_call_output "
                "(and reasoning) items",
            )
    return messages


def _read(model: type[_Item], item: Any, where: str) -> Any:
    try:
        return model.model_validate(item)
    except ValidationError as exc:
        raise first_error(exc, where) from None


def _text(content: str | list[Any], where: str) -> str:
    """Text, or text parts joined (as a chat message's parts are)."""
    if isinstance(content, str):
        return content
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in _TEXT_PARTS:
            raise not_text(f"{where}.{j}.type", kind, "parts", "input_text (or output_text) parts")
        if not isinstance(part.get("text"), str):
            _refuse(f"{where}.{j}.text", "give the part's text")
        texts.append(part["text"])
    return "".join(texts)
