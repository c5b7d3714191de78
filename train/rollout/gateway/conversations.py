"""The responses a session's Responses API calls made: what `previous_response_id` continues.

Each response is kept as the chat messages it added to its conversation (its input items, then its
answer) beside the response it continued, so a conversation of many responses is held once, not
once per response. Instructions are not kept: as in OpenAI's API, each request gives its own. A
session keeps its responses until it ends, whatever `store` says: nothing leaves the session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class _Kept:
    previous: str | None  # the response this one continued
    messages: list[dict[str, Any]]  # what it added: its input items, then its answer


class Conversations:
    """One session's responses, by id."""

    def __init__(self) -> None:
        self._kept: dict[str, _Kept] = {}

    def __contains__(self, response_id: object) -> bool:
        return response_id in self._kept

    def keep(self, response_id: str, previous: str | None, messages: list[dict[str, Any]]) -> None:
        self._kept[response_id] = _Kept(previous, list(messages))

    def history(self, response_id: str) -> list[dict[str, Any]]:
        """The conversation up to and including the answer of `response_id` (KeyError if unknown),
        as chat messages."""
        added: list[list[dict[str, Any]]] = []
        next_id: str | None = response_id
        while next_id is not None:
            kept = self._kept[next_id]
            added.append(kept.messages)
            next_id = kept.previous
        return [message for messages in reversed(added) for message in messages]
