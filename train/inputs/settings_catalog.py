"""Every setting of the config, read off the pydantic models: its dotted name, type, default and
description (docs/SETTINGS.md and `aworld-train render --explain` print them).

A section's own settings follow it: `algorithm.lora.rank`; an entry of a mapping of sections is
`NAME` (`policies.NAME.lr`), of a list `[]` (`env[].port`). With a config, each setting is read at
every entry the config holds (`policies.planner.lr`, `env[0].port`) and marked where the user set
it: set in its YAML or an override, and every section above it too (as `TrainConfig.fields_set`,
to every depth).
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from aworld_train.inputs.config import TrainConfig

TOP = ""  # the section of the top-level settings that are no section (backend, model, verl:, ...)


@dataclass(frozen=True)
class Setting:
    name: str  # dotted, with NAME and [] for a collection's entries
    type: str
    default: str  # as JSON (which YAML reads too); "required" where there is none
    description: str
    section: str  # the top-level section it belongs to; TOP for top-level plain settings
    holds_settings: bool  # a section, or a list or mapping of sections: its settings follow it


@dataclass(frozen=True)
class Reading:
    """One setting as one config holds it."""

    setting: Setting
    name: str  # the setting's name at this entry: policies.planner.lr, env[0].port
    value: str  # as JSON; "-" where no entry or section holds it
    user_set: bool


def catalog(model: type[BaseModel] = TrainConfig) -> list[Setting]:
    """Every setting of `model`, each section's followed by its own, in the models' order."""
    return [setting for setting, *_ in _walk(model, None, "", "", True)]


def readings(config: TrainConfig) -> list[Reading]:
    """Every setting as `config` holds it."""
    return [
        Reading(setting, name, _value_text(value, setting), user_set)
        for setting, name, value, user_set in _walk(TrainConfig, config, "", "", True)
    ]


_ABSENT = object()  # a setting under a section the config does not hold (algorithm.lora: null)


def _walk(
    model: type[BaseModel], instance: BaseModel | None, name: str, template: str, set_above: bool
) -> Iterator[tuple[Setting, str, Any, bool]]:
    for key, field in model.model_fields.items():
        inner = _section_type(field.annotation)
        setting = Setting(
            name=template + key,
            type=_type_text(field.annotation),
            default=_default_text(field),
            description=field.description or "",
            section=(template + key).split(".")[0].split("[")[0] if template or inner else TOP,
            holds_settings=inner is not None,
        )
        value = getattr(instance, key) if instance is not None else _ABSENT
        user_set = set_above and instance is not None and key in instance.model_fields_set
        yield setting, name + key, value, user_set
        if inner is not None:
            for entry, entry_template, child in _entries(field.annotation, key, value):
                yield from _walk(inner, child, name + entry, template + entry_template, user_set)


def _entries(annotation: Any, key: str, value: Any) -> list[tuple[str, str, BaseModel | None]]:
    """(name prefix, template prefix, section) of each entry a section field holds; one empty
    entry where it holds none, so that its settings are still listed."""
    shape = _collection(annotation)
    if shape == "list":
        held = list(enumerate(value)) if isinstance(value, list) else []
        return [(f"{key}[{i}].", f"{key}[].", v) for i, v in held] or [(f"{key}[].", f"{key}[].", None)]
    if shape == "dict":
        held = list(value.items()) if isinstance(value, dict) else []
        return [(f"{key}.{k}.", f"{key}.NAME.", v) for k, v in held] or [
            (f"{key}.NAME.", f"{key}.NAME.", None)
        ]
    return [(f"{key}.", f"{key}.", value if isinstance(value, BaseModel) else None)]


def _collection(annotation: Any) -> Literal["list", "dict", "one"]:
    for arm in _arms(annotation):
        origin = typing.get_origin(arm)
        if origin is list and _section_type(arm) is not None:
            return "list"
        if origin is dict and _section_type(arm) is not None:
            return "dict"
    return "one"


def _arms(annotation: Any) -> tuple[Any, ...]:
    """The alternatives of a union (`X | None`), or the annotation alone."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _section_type(annotation: Any) -> type[BaseModel] | None:
    """The section model a field holds: itself, optional, or as a list's or mapping's entries."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _section_type(arg)
        if found is not None:
            return found
    return None


def _type_text(annotation: Any) -> str:
    """A type as a config's reader writes it: `int | None`, `grpo | gigpo`, `dict[str, section]`."""
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return " | ".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_text(a) for a in args)
    if origin in (list, dict):
        return f"{origin.__name__}[{', '.join(_type_text(a) for a in args)}]"
    if annotation is Any:
        return "any"
    return getattr(annotation, "__name__", str(annotation))


def _default_text(field: FieldInfo) -> str:
    if field.default_factory is not None:
        default = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        default = field.default
    if isinstance(default, BaseModel):
        return "(section)"
    return json.dumps(default)


def _value_text(value: Any, setting: Setting) -> str:
    if value is _ABSENT:
        return "-"
    if isinstance(value, BaseModel):
        return "(section)"
    if setting.holds_settings and isinstance(value, list | dict) and value:
        return f"{len(value)} entr{'y' if len(value) == 1 else 'ies'}"
    return json.dumps(value, default=str)  # a free-form section (verl:) is shown whole
