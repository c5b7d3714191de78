"""The lock a trainer holds while it changes a served model's weights."""

from __future__ import annotations

import threading


class WeightsLock:
    """The lock a trainer holds while it changes the weights: cached keys/values are stale then
    (emptied on taking it, which also frees their memory for the update, and again on release).
    `on_change`, where given, runs before the release when the block raised nothing."""

    def __init__(self, invalidate, mutex: threading.Lock | None = None, on_change=None) -> None:
        self.mutex = mutex or threading.Lock()
        self.invalidate = invalidate
        self.on_change = on_change

    def __enter__(self) -> WeightsLock:
        self.mutex.acquire()
        self.invalidate()
        return self

    def __exit__(self, exc_type, *exc) -> None:
        try:
            if exc_type is None and self.on_change is not None:
                self.on_change()
            self.invalidate()
        finally:
            self.mutex.release()
