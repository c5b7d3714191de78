"""One episode's BFCL world: the entry's environment instances, its visible tools, its calls.

Instances are built the way bfcl-eval builds them for an entry (each involved class
loaded with a copy of its `initial_config`), and a call's result is turned into
text the way bfcl-eval's executor does, so an episode sees what a BFCL run sees.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import threading
from collections import OrderedDict
from typing import Any

from aworld_train.env.bfcl import catalog

EXECUTION_ERROR = "Error during execution: "  # bfcl-eval's prefix for a call that raised


class ToolCallError(Exception):
    """A call the episode may not make or that raised; its text is what the agent sees."""


def _instance(class_name: str, initial_config: dict[str, Any], long_context: bool) -> Any:
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING, STATELESS_CLASSES

    instance = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)()
    if class_name not in STATELESS_CLASSES:
        instance._load_scenario(copy.deepcopy(initial_config.get(class_name, {})), long_context=long_context)
    return instance


def result_text(value: Any) -> str:
    """A method's return value as bfcl-eval's executor writes it."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


class EpisodeWorld:
    def __init__(self, entry_id: str, hints: bool = False) -> None:
        self.entry = catalog.entry(entry_id)
        self.hints = hints
        long_context = "long_context" in entry_id
        self.instances = {
            name: _instance(name, self.entry.get("initial_config") or {}, long_context)
            for name in self.entry["involved_classes"]
        }
        self._methods: dict[str, Any] = {}
        for instance in self.instances.values():
            for name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not name.startswith("_"):
                    self._methods[name] = method
        self.lock = threading.Lock()

    def docs(self, turn: int) -> list[dict[str, Any]]:
        return catalog.revealed_docs(self.entry, turn)

    def call(self, name: str, arguments: dict[str, Any], turn: int) -> str:
        docs = {d["name"]: d for d in self.docs(turn)}
        if name not in docs or name not in self._methods:
            raise ToolCallError(f"{EXECUTION_ERROR}function {name!r} is not available")
        try:
            with self.lock:
                value = self._methods[name](**arguments)
        except Exception as exc:
            message = f"{EXECUTION_ERROR}{exc}"
            if self.hints:
                message += "\n" + usage_hint(docs[name])
            raise ToolCallError(message) from None
        text = result_text(value)
        if self.hints and isinstance(value, dict) and "error" in value:
            text += "\n" + usage_hint(docs[name])  # the environment refused the call: say how it is used
        return text


def usage_hint(doc: dict[str, Any]) -> str:
    """The 'actionable feedback' line: how the failed function is meant to be called."""
    params = (doc.get("parameters") or {}).get("properties") or {}
    required = set((doc.get("parameters") or {}).get("required") or [])
    parts = [
        f"{name}: {prop.get('type', 'any')}{'' if name in required else ' (optional)'}"
        for name, prop in params.items()
    ]
    return f"Hint: {doc['name']}({', '.join(parts)})"


class Worlds:
    """Episode id -> world, bounded so a long-running server does not grow without end."""

    def __init__(self, capacity: int = 4096, hints: bool = False) -> None:
        self._data: OrderedDict[str, EpisodeWorld] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()
        self.hints = hints

    def get(self, episode: str, entry_id: str) -> EpisodeWorld:
        with self._lock:
            world = self._data.get(episode)
            if world is not None and world.entry["id"] != entry_id:
                raise ToolCallError(
                    f"episode {episode!r} was started on BFCL entry {world.entry['id']!r}, not {entry_id!r}"
                )
            if world is None:
                world = self._data[episode] = EpisodeWorld(entry_id, self.hints)
            self._data.move_to_end(episode)
            while len(self._data) > self._capacity:
                self._data.popitem(last=False)
            return world

    def __len__(self) -> int:
        return len(self._data)
