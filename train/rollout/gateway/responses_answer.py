"""The Responses API's answer to an episode's reply: the `openai` package's own `Response`, and for
`stream: true` its events, from `response.created` to `response.completed` (or `response.incomplete`
where the answer reached its token limit). The request side is responses_api.py."""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseFunctionToolCall,
    ResponseIncompleteEvent,
    ResponseInProgressEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextConfig,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
    ResponseUsage,
    ToolChoiceFunction,
    response_text_delta_event,
    response_text_done_event,
)
from openai.types.responses.response import IncompleteDetails
from openai.types.responses.response_output_text import Logprob
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from openai.types.shared import ResponseFormatText
from pydantic import BaseModel

from aworld_train.rollout.episodes.driver import Reply
from aworld_train.rollout.gateway.openai_answers import assistant_message
from aworld_train.rollout.gateway.responses_api import ResponsesRequest


def response(reply: Reply, req: ResponsesRequest) -> Response:
    """The `Response` an episode's reply makes: a message item with its text (if it has text, or
    makes no call), then one function_call item per tool call."""
    incomplete = reply.finish_reason == "length"
    output: list[Any] = []
    if reply.content or not reply.tool_calls:
        text = ResponseOutputText(
            type="output_text", text=reply.content, annotations=[], logprobs=_logprobs(reply, Logprob)
        )
        status = "incomplete" if incomplete else "completed"
        output.append(
            ResponseOutputMessage(
                id=_id("msg"), type="message", role="assistant", status=status, content=[text]
            )
        )
    for call in reply.tool_calls:
        function = call["function"]
        output.append(
            ResponseFunctionToolCall(
                id=_id("fc"),
                type="function_call",
                call_id=call["id"],
                name=function["name"],
                arguments=function["arguments"],
                status="completed",
            )
        )
    prompt, completion = reply.usage.get("prompt_tokens", 0), reply.usage.get("completion_tokens", 0)
    usage = ResponseUsage(
        input_tokens=prompt,
        input_tokens_details=InputTokensDetails(cached_tokens=0, cache_write_tokens=0),
        output_tokens=completion,
        output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
        total_tokens=prompt + completion,
    )
    now = time.time()
    if incomplete:
        ending = {"status": "incomplete", "incomplete_details": IncompleteDetails(reason="max_output_tokens")}
    else:
        ending = {"status": "completed", "incomplete_details": None, "completed_at": now}
    return _response(req, id=_id("resp"), created_at=now, output=output, usage=usage, **ending)


def _response(req: ResponsesRequest, **fields: Any) -> Response:
    """A `Response` to `req` with `fields` (id, status, output, ...): the request's settings echoed."""
    kind, name = req.choice
    return Response(
        object="response",
        error=None,
        instructions=req.instructions,
        model=req.model,
        parallel_tool_calls=req.parallel_tool_calls is not False,
        tool_choice=ToolChoiceFunction(type="function", name=name) if name is not None else kind,
        tools=req.function_tools,
        text=ResponseTextConfig(format=req.text_format or ResponseFormatText(type="text")),
        max_output_tokens=req.max_output_tokens,
        previous_response_id=req.previous_response_id,
        store=req.store is not False,
        truncation="disabled",
        **fields,
    )


def kept_messages(reply: Reply, req: ResponsesRequest) -> list[dict[str, Any]]:
    """What a response adds to its conversation: its input, then its answer as a chat message."""
    return [*req.input_messages, assistant_message(reply)]


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


def _logprobs(reply: Reply, model: type[BaseModel]) -> list[Any] | None:
    """The sampled tokens' logprobs as `model`s (the output text's, or a text event's)."""
    if reply.logprobs is None:
        return None
    return [
        model(token=token, bytes=list(token.encode()), logprob=logprob, top_logprobs=[])
        for token, logprob in reply.logprobs
    ]


def dump(model: BaseModel) -> dict[str, Any]:
    """An SDK object as JSON: the fields it was given (nulls too), by their wire names."""
    return model.model_dump(mode="json", exclude_unset=True, by_alias=True)


def events(final: Response, reply: Reply, req: ResponsesRequest) -> Iterator[tuple[str, dict[str, Any]]]:
    """The stream of a whole answer, as (event name, data): the response created and in progress
    (no output yet); each output item added, its text or arguments as one delta, done; then the
    response completed (or incomplete)."""
    numbers = itertools.count()

    def event(model: type[BaseModel], name: str, **fields: Any) -> tuple[str, dict[str, Any]]:
        return name, dump(model(type=name, sequence_number=next(numbers), **fields))

    start = _response(req, id=final.id, created_at=final.created_at, status="in_progress", output=[])
    yield event(ResponseCreatedEvent, "response.created", response=start)
    yield event(ResponseInProgressEvent, "response.in_progress", response=start)
    for index, item in enumerate(final.output):
        if isinstance(item, ResponseOutputMessage):
            yield from _message_events(event, item, index, reply)
        else:
            yield from _call_events(event, item, index)
        yield event(ResponseOutputItemDoneEvent, "response.output_item.done", output_index=index, item=item)
    if final.status == "incomplete":
        yield event(ResponseIncompleteEvent, "response.incomplete", response=final)
    else:
        yield event(ResponseCompletedEvent, "response.completed", response=final)


def _message_events(event: Callable, item: ResponseOutputMessage, index: int, reply: Reply) -> Iterator:
    """A message item's events: added, its text part added, the text as one delta, done."""
    at = {"item_id": item.id, "output_index": index}
    added = item.model_copy(update={"status": "in_progress", "content": []})
    yield event(ResponseOutputItemAddedEvent, "response.output_item.added", output_index=index, item=added)
    text = item.content[0]
    empty = ResponseOutputText(type="output_text", text="", annotations=[], logprobs=[])
    yield event(
        ResponseContentPartAddedEvent,
        "response.content_part.added",
        **at,
        content_index=0,
        part=empty,
    )
    # each event type has a Logprob class of its own
    delta_logprobs = _logprobs(reply, response_text_delta_event.Logprob) or []
    done_logprobs = _logprobs(reply, response_text_done_event.Logprob) or []
    yield event(
        ResponseTextDeltaEvent,
        "response.output_text.delta",
        **at,
        content_index=0,
        delta=text.text,
        logprobs=delta_logprobs,
    )
    yield event(
        ResponseTextDoneEvent,
        "response.output_text.done",
        **at,
        content_index=0,
        text=text.text,
        logprobs=done_logprobs,
    )
    yield event(ResponseContentPartDoneEvent, "response.content_part.done", **at, content_index=0, part=text)


def _call_events(event: Callable, item: ResponseFunctionToolCall, index: int) -> Iterator:
    """A function_call item's events: added, its arguments as one delta, done."""
    at = {"item_id": item.id, "output_index": index}
    added = item.model_copy(update={"status": "in_progress", "arguments": ""})
    yield event(ResponseOutputItemAddedEvent, "response.output_item.added", output_index=index, item=added)
    yield event(
        ResponseFunctionCallArgumentsDeltaEvent,
        "response.function_call_arguments.delta",
        **at,
        delta=item.arguments,
    )
    yield event(
        ResponseFunctionCallArgumentsDoneEvent,
        "response.function_call_arguments.done",
        **at,
        arguments=item.arguments,
    )
