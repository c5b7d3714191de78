"""BFCL multi-turn entries, their possible answers and their tools, read from the `bfcl-eval` package."""

from __future__ import annotations

import functools
from typing import Any

CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
INSTALL_HINT = "install it with: pip install --no-deps bfcl-eval==2026.3.23 (see the Makefile's setup target)"
# JSON-schema types for the BFCL doc types that occur in the multi-turn function docs.
_SCHEMA_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": "string", "list": "array"}


class UnknownEntry(KeyError):
    pass


def _bfcl_utils():
    try:
        import bfcl_eval.utils as utils
    except ImportError as exc:
        raise ImportError(
            f"the BFCL environment needs the bfcl-eval package ({exc}); {INSTALL_HINT}"
        ) from None
    return utils


def category_of(entry_id: str) -> str:
    """'multi_turn_miss_func_12' -> 'miss_func'."""
    prefix = entry_id.rsplit("_", 1)[0]
    category = prefix.removeprefix("multi_turn_")
    if prefix == category or category not in CATEGORIES:
        raise UnknownEntry(
            f"{entry_id!r} is not a BFCL multi-turn entry id (multi_turn_<{'|'.join(CATEGORIES)}>_<n>)"
        )
    return category


@functools.cache
def _entries(category: str) -> dict[str, dict[str, Any]]:
    # load_dataset_entry adds each entry's function docs and moves held-back ones to `missed_function`.
    entries = _bfcl_utils().load_dataset_entry(f"multi_turn_{category}")
    return {e["id"]: e for e in entries}


@functools.cache
def _answers(category: str) -> dict[str, list[list[str]]]:
    return {
        a["id"]: a["ground_truth"] for a in _bfcl_utils().load_ground_truth_entry(f"multi_turn_{category}")
    }


def entries(category: str) -> list[dict[str, Any]]:
    """All entries of one category, in the package's order. Treat them as read-only."""
    if category not in CATEGORIES:
        raise ValueError(
            f"unknown BFCL multi-turn category {category!r}; choose from {', '.join(CATEGORIES)}"
        )
    return list(_entries(category).values())


def entry(entry_id: str) -> dict[str, Any]:
    found = _entries(category_of(entry_id)).get(entry_id)
    if found is None:
        raise UnknownEntry(f"BFCL has no entry {entry_id!r}")
    return found


def possible_answer(entry_id: str) -> list[list[str]]:
    """The possible-answer calls per turn, as BFCL writes them: ["cd(folder='document')", ...]."""
    return _answers(category_of(entry_id))[entry_id]


def revealed_docs(entry_: dict[str, Any], turn: int) -> list[dict[str, Any]]:
    """The function docs an episode may use at user turn `turn` (held-back ones from their turn on)."""
    docs = list(entry_["function"])
    for reveal_turn, held in (entry_.get("missed_function") or {}).items():
        if int(reveal_turn) <= turn:
            docs.extend(held)
    return docs


def user_turns(entry_: dict[str, Any]) -> list[str]:
    """One user message per BFCL turn; a turn that only reveals functions gets BFCL's own prompt for it."""
    from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC

    turns = []
    for messages in entry_["question"]:
        texts = [m["content"] for m in messages if m.get("role") == "user" and m.get("content")]
        turns.append("\n\n".join(texts) if texts else DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC)
    return turns


def _schema(properties: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, prop in properties.items():
        prop = dict(prop)
        prop["type"] = _SCHEMA_TYPES.get(prop.get("type"), prop.get("type", "string"))
        if isinstance(prop.get("items"), dict):
            prop["items"] = _schema({"_": prop["items"]})["_"]
        if isinstance(prop.get("properties"), dict):
            prop["properties"] = _schema(prop["properties"])
        out[name] = prop
    return out


def input_schema(doc: dict[str, Any]) -> dict[str, Any]:
    """A BFCL function doc's parameters as the JSON schema MCP tools carry."""
    params = doc.get("parameters") or {}
    schema: dict[str, Any] = {"type": "object", "properties": _schema(params.get("properties") or {})}
    if params.get("required"):
        schema["required"] = list(params["required"])
    return schema
