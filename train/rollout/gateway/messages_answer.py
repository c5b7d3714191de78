"""The Messages API's answer to an episode's reply: the `anthropic` package's own `Message`, and
for `stream: true` its events, from `message_start` to `message_stop`. The request side is
messages_api.py."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

from anthropic.types import (
    InputJSONDelta,
    Message,
    MessageDeltaUsage,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
    TextBlock,
    TextDelta,
    ToolUseBlock,
    Usage,
)
from anthropic.types.raw_message_delta_event import Delta
from pydantic import BaseModel

from aworld_train.rollout.episodes.driver import Reply

_STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens"}


def message(reply: Reply, model: str) -> Message:
    """The `Message` an episode's reply makes: a text block (if it has text, or makes no call),
    then one tool_use block per tool call."""
    content: list[Any] = []
    if reply.content or not reply.tool_calls:
        content.append(TextBlock(type="text", text=reply.content))
    for call in reply.tool_calls:
        function = call["function"]
        content.append(
            ToolUseBlock(
                type="tool_use", id=call["id"], name=function["name"], input=json.loads(function["arguments"])
            )
        )
    return Message(
        id=f"msg_{secrets.token_hex(16)}",
        type="message",
        role="assistant",
        model=model,
        content=content,
        stop_reason=_STOP_REASONS.get(reply.finish_reason, "end_turn"),
        stop_sequence=None,
        usage=Usage(
            input_tokens=reply.usage.get("prompt_tokens", 0),
            output_tokens=reply.usage.get("completion_tokens", 0),
        ),
    )


def dump(model: BaseModel) -> dict[str, Any]:
    """An SDK object as JSON: the fields it was given (nulls too)."""
    return model.model_dump(mode="json", exclude_unset=True, by_alias=True)


def events(final: Message) -> Iterator[tuple[str, dict[str, Any]]]:
    """The stream of a whole answer, as (event name, data): the message started (no content), each
    block started, its text or input JSON as one delta, stopped; the stop reason; the end."""

    def event(model: type[BaseModel], name: str, **fields: Any) -> tuple[str, dict[str, Any]]:
        return name, dump(model(type=name, **fields))

    usage = Usage(input_tokens=final.usage.input_tokens, output_tokens=0)
    start = final.model_copy(update={"content": [], "stop_reason": None, "usage": usage})
    yield event(RawMessageStartEvent, "message_start", message=start)
    for index, block in enumerate(final.content):
        if isinstance(block, TextBlock):
            opened, delta = TextBlock(type="text", text=""), TextDelta(type="text_delta", text=block.text)
        else:
            opened = block.model_copy(update={"input": {}})
            delta = InputJSONDelta(type="input_json_delta", partial_json=json.dumps(block.input))
        yield event(RawContentBlockStartEvent, "content_block_start", index=index, content_block=opened)
        yield event(RawContentBlockDeltaEvent, "content_block_delta", index=index, delta=delta)
        yield event(RawContentBlockStopEvent, "content_block_stop", index=index)
    yield event(
        RawMessageDeltaEvent,
        "message_delta",
        delta=Delta(stop_reason=final.stop_reason, stop_sequence=final.stop_sequence),
        usage=MessageDeltaUsage(output_tokens=final.usage.output_tokens),
    )
    yield event(RawMessageStopEvent, "message_stop")
