"""Command-line overrides of a config: `key.sub=value`, the value read as YAML."""

from __future__ import annotations

from typing import Any

import yaml

from aworld_train.core.errors import ConfigError

__all__ = ["apply_overrides", "parse_override"]


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b=value` -> (['a', 'b'], value parsed as YAML scalar/list/dict)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like key.sub=value")
    key, raw = text.split("=", 1)
    if not key.strip():
        raise ConfigError(f"override {text!r} has an empty key")
    return key.strip().split("."), yaml.safe_load(raw) if raw.strip() else None


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for text in overrides:
        keys, value = parse_override(text)
        node = data
        for key in keys[:-1]:
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            if not isinstance(child, dict):
                raise ConfigError(
                    f"override {text!r}: '{key}' is a value, not a section: write {key}=value, or "
                    "override a key inside a section (rollout.max_assistant_turns=4)"
                )
            node = child
        node[keys[-1]] = value
    return data
