"""An answer made whole, sent as server-sent events: chat completion chunks, or named events."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import StreamingResponse


def chunk_stream(chunks: list[dict[str, Any]]) -> StreamingResponse:
    """Chat completion chunks as server-sent events, ending with OpenAI's [DONE]."""

    async def events():
        for chunk in chunks:
            yield f"data: {json.dumps(chunk)}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


def event_stream(events: list[tuple[str, dict[str, Any]]]) -> StreamingResponse:
    """Named server-sent events (`event:` and `data:` lines), as the Responses and Messages APIs
    stream; made whole before the first is sent (the policy answers a call whole)."""

    async def lines():
        for name, data in events:
            yield f"event: {name}\ndata: {json.dumps(data)}\n\n"

    return StreamingResponse(lines(), media_type="text/event-stream")
