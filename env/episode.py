"""The episode id a tool server keys its state by (ARCHITECTURE.md invariant 3)."""

from __future__ import annotations

from typing import Any

from aworld_train.core.protocol import EPISODE_HEADER


def episode_of(ctx: Any) -> str:
    """The `X-Episode-Id` header of the request behind a FastMCP `Context`; '' outside HTTP."""
    try:
        request = ctx.request_context.request
        return request.headers.get(EPISODE_HEADER, "") if request is not None else ""
    except (AttributeError, ValueError, LookupError):
        return ""
