"""Anthropic's Messages API (`POST /messages`) on the episode's chat calls.

A request becomes the chat messages and tools a chat completion would carry, so an agent on
Anthropic's SDK keeps the same token ledger as one on OpenAI's: `system` (text, or text blocks) is
the system message; a message's `text` blocks its text; an assistant's `tool_use` blocks its tool
calls (their `input` the arguments); a user's `tool_result` blocks tool messages, before the text
of the same message; `thinking` blocks are dropped (the policy's turns are sampled whole, in their
text). Blocks of one message are joined with a newline. `tools` (`name`, `description`,
`input_schema`), `tool_choice` (auto, any, tool, none; `disable_parallel_tool_use`),
`max_tokens`, `stop_sequences` and `output_config.format` become the call's `CallOptions`.

Refused with 400 naming the field: server tools (web search, code execution, bash, ...), images
and documents, a last message of the assistant's (a prefill to continue), `container`,
`mcp_servers`, `context_management`. Ignored on purpose: `temperature`, `top_p` and `top_k` (the
run's stand: the trainer computes its logprobs under them), `thinking` and `output_config.effort`
(the policy thinks as its template and training have it), a tool result's `is_error` (its text is
what the policy reads), `cache_control`, `metadata`, `service_tier`.

The answer (messages_answer.py) is the SDK's own `Message`, and for `stream: true` its events, so
the shapes are the `anthropic` package's; errors are in Anthropic's shape.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from aworld_train.rollout.episodes.driver import CallOptions
from aworld_train.rollout.gateway import field_rules
from aworld_train.rollout.gateway.openai_api import check_named_tool
from aworld_train.rollout.gateway.refusals import ApiRequest, first_error, not_text, refuse

# the episode names a chat completion's parameters when it refuses a call: here they are these
PARAMS = {
    "response_format": "output_config.format",
    "parallel_tool_calls": "tool_choice.disable_parallel_tool_use",
}
# the policy's own turns hold their reasoning as it was sampled, in their text
_DROPPED = ("thinking", "redacted_thinking")


class _Shape(BaseModel):
    # what else a block carries (cache_control, citations, ...) is not read
    model_config = ConfigDict(extra="allow")


class _Message(_Shape):
    role: Literal["user", "assistant"]
    content: str | list[Any]


class _Text(_Shape):
    text: str


class _ToolUse(_Shape):
    id: str
    name: str
    input: dict[str, Any]


class _ToolResult(_Shape):
    tool_use_id: str
    content: str | list[Any] = ""


class _Tool(_Shape):
    name: str
    description: str | None = None
    input_schema: dict[str, Any]


class _ToolChoice(_Shape):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False


class _OutputFormat(_Shape):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class MessagesRequest(ApiRequest):
    """`POST /messages`: the fields read; `check` turns them into a chat call."""

    RULES: ClassVar = field_rules.MESSAGES

    model: str | None = None  # None: the session's own name (Session.model)
    max_tokens: int = Field(ge=1)
    messages: list[Any] = Field(min_length=1)
    system: str | list[Any] | None = None
    tools: list[Any] | None = None
    tool_choice: dict[str, Any] | None = None
    stop_sequences: list[str] | None = None
    output_config: dict[str, Any] | None = None
    stream: bool = False
    temperature: float | None = Field(None, ge=0)  # the run's temperature stands
    top_p: float | None = None
    top_k: int | None = None
    container: Any = None
    mcp_servers: Any = None
    context_management: Any = None

    _messages: list[dict[str, Any]] = PrivateAttr(default_factory=list)
    _tools: list[dict[str, Any]] | None = PrivateAttr(None)
    _choice: _ToolChoice = PrivateAttr(default_factory=lambda: _ToolChoice(type="auto"))
    _schema: dict[str, Any] | None = PrivateAttr(None)

    def check(self) -> None:
        for name, what in (
            ("container", "containers of Anthropic's code execution"),
            ("mcp_servers", "MCP servers called by Anthropic's side"),
            ("context_management", "context editing"),
        ):
            if getattr(self, name) is not None:
                _refuse(name, f"{what} are not served here: leave {name} out")
        system = [] if self.system is None else [{"role": "system", "content": _text(self.system, "system")}]
        self._messages = system + chat_messages(self.messages)
        self._tools = [_chat_tool(tool, f"tools.{i}") for i, tool in enumerate(self.tools or [])] or None
        if self.tool_choice is not None:
            self._choice = _read(_ToolChoice, self.tool_choice, "tool_choice")
            if self._choice.type == "tool":
                if self._choice.name is None:
                    _refuse("tool_choice.name", "name the tool a 'tool' choice calls")
                check_named_tool(self._choice.name, self._tools, "tool_choice.name")
        fmt = (self.output_config or {}).get("format")
        if fmt is not None:
            self._schema = _read(_OutputFormat, fmt, "output_config.format").schema_

    @property
    def chat_messages(self) -> list[dict[str, Any]]:
        return self._messages

    @property
    def chat_tools(self) -> list[dict[str, Any]] | None:
        return self._tools

    def options(self) -> CallOptions:
        kind = {"any": "required", "tool": "function"}.get(self._choice.type, self._choice.type)
        return CallOptions(
            max_tokens=self.max_tokens,
            stop=tuple(self.stop_sequences or ()),
            tool_choice=kind,
            tool_name=self._choice.name if kind == "function" else None,
            parallel_tool_calls=not self._choice.disable_parallel_tool_use,
            json_schema=self._schema,
        )


def _refuse(param: str, fix: str) -> NoReturn:
    raise refuse(param, fix)


def _read(model: type[BaseModel], value: Any, where: str) -> Any:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise first_error(exc, where) from None


def _chat_tool(tool: Any, where: str) -> dict[str, Any]:
    kind = tool.get("type", "custom") if isinstance(tool, dict) else "custom"
    if kind not in ("custom", None):
        _refuse(
            f"{where}.type",
            f"{kind!r} tools run on Anthropic's side and are not served here: give the agent a tool "
            "(name, description, input_schema) that does the same",
        )
    spec = _read(_Tool, tool, where)
    function = {"name": spec.name, "parameters": spec.input_schema}
    if spec.description is not None:
        function["description"] = spec.description
    return {"type": "function", "function": function}


def chat_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """Anthropic messages as chat messages (RequestError naming the first block it cannot read)."""
    chat: list[dict[str, Any]] = []
    for i, value in enumerate(messages):
        where = f"messages.{i}"
        message = _read(_Message, value, where)
        if message.role == "assistant" and i == len(messages) - 1:
            _refuse(
                where,
                "the conversation ends with the assistant's message, which the policy would have to "
                "continue (a prefill): end it with the user's message",
            )
        blocks = (
            [{"type": "text", "text": message.content}]
            if isinstance(message.content, str)
            else message.content
        )
        if message.role == "assistant":
            chat.append(_assistant(blocks, f"{where}.content"))
        else:
            chat.extend(_user(blocks, f"{where}.content"))
    return chat


def _kind(block: Any) -> str | None:
    return block.get("type") if isinstance(block, dict) else None


def _assistant(blocks: list[Any], where: str) -> dict[str, Any]:
    texts, calls = [], []
    for j, block in enumerate(blocks):
        kind = _kind(block)
        if kind == "text":
            texts.append(_read(_Text, block, f"{where}.{j}").text)
        elif kind == "tool_use":
            use = _read(_ToolUse, block, f"{where}.{j}")
            arguments = json.dumps(use.input)
            calls.append(
                {"id": use.id, "type": "function", "function": {"name": use.name, "arguments": arguments}}
            )
        elif kind not in _DROPPED:
            _refuse(
                f"{where}.{j}.type",
                f"{kind!r} blocks are not served: give text, tool_use (or thinking) blocks",
            )
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    return message


def _user(blocks: list[Any], where: str) -> list[dict[str, Any]]:
    results, texts = [], []
    for j, block in enumerate(blocks):
        kind = _kind(block)
        if kind == "text":
            texts.append(_read(_Text, block, f"{where}.{j}").text)
        elif kind == "tool_result":
            result = _read(_ToolResult, block, f"{where}.{j}")
            content = _text(result.content, f"{where}.{j}.content")
            results.append({"role": "tool", "tool_call_id": result.tool_use_id, "content": content})
        else:
            raise not_text(f"{where}.{j}.type", kind, "blocks", "text or tool_result blocks")
    if texts or not results:
        return [*results, {"role": "user", "content": "\n".join(texts)}]
    return results


def _text(content: str | list[Any], where: str) -> str:
    """Text, or text blocks joined with a newline."""
    if isinstance(content, str):
        return content
    texts = []
    for j, block in enumerate(content):
        if _kind(block) != "text":
            raise not_text(f"{where}.{j}.type", _kind(block), "blocks", "text blocks")
        texts.append(_read(_Text, block, f"{where}.{j}").text)
    return "\n".join(texts)


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None) -> dict:
    """Anthropic's error shape (its message names the field: Anthropic's has no `param`)."""
    return {"type": "error", "error": {"type": kind, "message": message}}
