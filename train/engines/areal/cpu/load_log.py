"""What each weight version served, and the loads that replaced them: the record both CPU servers
AReaL drives keep (our transformers server, cpu/server.py; vLLM's front, cpu/vllm_front.py), each
load appended to the `--events` JSONL file, so a run's log shows which version served what."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


class LoadLog:
    def __init__(self, events: Path | None, counters: tuple[str, ...]) -> None:
        self.events = events
        self.zero = dict.fromkeys(counters, 0)
        # per weight version: a request that finishes on the new weights while a load is still being
        # recorded counts for the new version, not for the one the load replaced
        self.counts: dict[int, dict[str, int]] = {}
        self.loads: list[dict[str, Any]] = []

    def served_by(self, version: int) -> dict[str, int]:
        """The counters of `version`, which the caller adds to."""
        return self.counts.setdefault(version, dict(self.zero))

    def record(
        self, event: str, previous: int, version: int, path: Path, tensors: int, started: float, **extra: Any
    ) -> dict[str, Any]:
        """A load of `version` (begun at monotonic time `started`), with what the weights it replaced
        (version `previous`) served."""
        record = {
            "event": event,
            "version": version,
            "path": str(path),
            "tensors": tensors,
            "load_s": round(time.monotonic() - started, 3),
            "served_on_previous": {"version": previous, **self.counts.pop(previous, dict(self.zero))},
            **extra,
        }
        self.loads.append(record)
        if self.events is not None:
            with self.events.open("a") as out:
                out.write(json.dumps(record) + "\n")
        return record
