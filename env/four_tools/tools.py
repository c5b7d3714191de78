"""The four tools as plain functions, shared by the MCP server, the data generator and the reward.

Everything is deterministic: the weather of a city on a date comes from a hash of the
two, and the clock of an episode is fixed by its task id, so the same task always sees
the same time and a reward can be computed again from the row alone.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re

from aworld_train.env.calculator import evaluate
from aworld_train.env.four_tools.corpus import DOCUMENTS

CONDITIONS = ("sunny", "cloudy", "rainy", "windy", "snowy", "foggy")
EPOCH = dt.datetime(2025, 6, 2, 0, 0)  # clocks lie within 60 days after it
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    {"the", "a", "an", "of", "is", "in", "how", "what", "many", "long", "tall", "big", "on", "to"}
)


class ToolError(ValueError):
    pass


def _digest(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("|".join(parts).encode()).digest()[:8], "big")


def clock(task_id: str) -> dt.datetime:
    """The episode's fixed 'now': a minute within 60 days after EPOCH chosen by the task id."""
    return EPOCH + dt.timedelta(minutes=_digest("clock", task_id) % (60 * 24 * 60))


def current_time(task_id: str) -> str:
    return clock(task_id).strftime("%Y-%m-%d %H:%M") + " UTC"


def _date(date: str, task_id: str) -> str:
    text = (date or "today").strip().lower()
    today = clock(task_id).date()
    if text == "today":
        return today.isoformat()
    if text == "tomorrow":
        return (today + dt.timedelta(days=1)).isoformat()
    try:
        return dt.date.fromisoformat(text).isoformat()
    except ValueError:
        raise ToolError(f"date must be 'today', 'tomorrow' or YYYY-MM-DD, not {date!r}") from None


def weather(city: str, date: str = "today", task_id: str = "") -> dict:
    """Simulated weather: the same city and date always give the same answer."""
    name = " ".join((city or "").split())
    if not name:
        raise ToolError("city is empty")
    day = _date(date, task_id)
    seed = _digest("weather", name.lower(), day)
    return {
        "city": name.title(),
        "date": day,
        "condition": CONDITIONS[seed % len(CONDITIONS)],
        "temperature_c": (seed >> 8) % 36 - 5,
        "humidity": 30 + (seed >> 16) % 61,
    }


def weather_text(report: dict) -> str:
    return (
        f"{report['city']} on {report['date']}: {report['condition']}, {report['temperature_c']}°C, "
        f"humidity {report['humidity']}%"
    )


def search(query: str, top_k: int = 2) -> list[tuple[str, str]]:
    """The corpus notes sharing the most words with the query (ties in corpus order)."""
    words = set(_WORD.findall((query or "").lower())) - _STOP
    if not words:
        raise ToolError("query is empty")
    scored = []
    for index, (title, text) in enumerate(DOCUMENTS):
        overlap = len(words & set(_WORD.findall(f"{title} {text}".lower())))
        if overlap:
            scored.append((-overlap, index, title, text))
    return [(title, text) for _, _, title, text in sorted(scored)[:top_k]]


def search_text(query: str) -> str:
    hits = search(query)
    if not hits:
        return "No results."
    return "\n".join(f"{i}. {title}: {text}" for i, (title, text) in enumerate(hits, start=1))


def calculate(expression: str) -> str:
    return evaluate(expression)
