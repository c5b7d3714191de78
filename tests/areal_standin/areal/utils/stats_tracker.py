"""Stand-in for `areal.utils.stats_tracker`: named trackers that keep the scalars recorded."""

from __future__ import annotations

from collections import defaultdict

TRACKERS: dict[str, Tracker] = {}


class Tracker:
    def __init__(self, name: str) -> None:
        self.name = name
        self.stats: dict[str, list[float]] = defaultdict(list)

    def scalar(self, **kwargs: float) -> None:
        for key, value in kwargs.items():
            self.stats[key].append(float(value))


def get(name: str = "") -> Tracker:
    return TRACKERS.setdefault(name, Tracker(name))
