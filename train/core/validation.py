"""What a user wrote, read with errors that name the key or file and the fix: YAML files holding a
mapping, pydantic's validation errors, and specs kept as YAML files. Ground floor: the config and
the agent specs use it."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from aworld_train.core.atomic_files import write_text
from aworld_train.core.errors import ConfigError


def did_you_mean(word: str, choices: Any) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _fields_at(path: tuple[Any, ...], root: type[BaseModel]) -> list[str]:
    """Field names of the model section that `path` (a pydantic error location) points into."""
    model = root
    for part in path:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field else None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        else:
            break
    return list(model.model_fields)


# what to do, by pydantic's error type (its message says only what is wrong)
_FIXES = {
    "greater_than_equal": "set it to {ge} or more",
    "greater_than": "set it above {gt}",
    "less_than_equal": "set it to {le} or less",
    "less_than": "set it below {lt}",
    "int_parsing": "give a whole number",
    "int_from_float": "give a whole number",
    "float_parsing": "give a number",
    "bool_parsing": "give true or false",
    "string_type": "give a string",
    "list_type": "give a list, e.g. [a, b]",
    "dict_type": "give a mapping, e.g. {{key: value}}",
    "model_type": "give a mapping of its fields",
    "too_short": "give at least {min_length} item(s)",
    "missing": "add it",
    "literal_error": "choose one of those",
}


# a field whose value a refusal must not print: it may be the secret it refuses (a bare `key`,
# or one named for what it unlocks; not a data column's `prompt_key`/`answer_key`)
SECRET_NAME = re.compile(
    r"(^|_)(api_?key|access_?key|secret_?key|private_?key|toolbench_key|token|secret|password|credentials?)$"
    r"|^key$",
    re.IGNORECASE,
)


def _shown(loc: tuple[Any, ...], value: Any) -> str:
    names = [str(p) for p in loc] + (list(map(str, value)) if isinstance(value, dict) else [])
    return (
        "(value not shown: it may be a secret)"
        if any(SECRET_NAME.search(n) for n in names)
        else f"(got {value!r})"
    )


def http_url_problem(value: str) -> str | None:
    """None for an http(s) URL with a host (and a valid port); else what is wrong with it."""
    try:
        url = urlparse(value)
        port_ok = url.port is None or url.port > 0
    except ValueError as exc:
        return str(exc)
    if url.scheme not in ("http", "https") or not url.hostname:
        return "not an http(s) URL with a host"
    return None if port_ok else "port 0"


def explain_validation(error: ValidationError, root: type[BaseModel], noun: str = "config") -> str:
    """pydantic's errors as ours: one line each, naming the key, with a "did you mean" or the fix."""
    lines = []
    for item in error.errors():
        loc = tuple(item["loc"])
        where = ".".join(str(p) for p in loc)
        if item["type"] == "extra_forbidden":
            hint = did_you_mean(loc[-1], _fields_at(loc[:-1], root))
            lines.append(f"unknown {noun} key '{where}'{hint}; remove it or fix its spelling")
        elif not loc and item["type"] == "value_error":  # a check of the whole (a model validator)
            lines.append(f"{noun}: {item['msg'].removeprefix('Value error, ')}")
        elif not loc:
            lines.append(f"{noun}: {item['msg']} (got {type(item.get('input')).__name__}): write a mapping")
        else:
            msg = item["msg"].removeprefix("Value error, ")
            fix = _FIXES.get(item["type"], "")
            fix = f": {fix.format(**item.get('ctx', {}))}" if fix else ""
            lines.append(f"{noun} field '{where}': {msg} {_shown(loc, item.get('input'))}{fix}")
    return "\n".join(lines)


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error: PyYAML keeps
    the later value without a word (YAML itself says keys are unique), so a setting written twice
    would silently lose one of its values."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    first: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            seen = key in first
        except TypeError:  # an unhashable key: PyYAML's own constructor says so
            break
        if seen:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"key {key!r} appears twice in one mapping (line {first[key] + 1}, then line "
                f"{key_node.start_mark.line + 1}); keep one",
                key_node.start_mark,
            )
        first[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def load_yaml(text: str) -> Any:
    """YAML text as data (PyYAML's safe subset); a key given twice in a mapping is a YAMLError."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass


def yaml_problem(exc: yaml.YAMLError) -> str:
    """`line L, column C: <problem>` of a YAML error, in one line."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem


def read_yaml(path: str | Path, what: str = "config file") -> dict[str, Any]:
    """A YAML file holding a mapping; `what` names it in errors."""
    path = Path(path)
    if not path.is_file():
        where = "is a folder" if path.is_dir() else "does not exist"
        raise ConfigError(f"{what} {str(path)!r} {where}: give the path of a YAML file")
    try:
        data = load_yaml(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"{what} {str(path)!r} is not valid YAML ({yaml_problem(exc)}): fix it there"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{what} {str(path)!r} holds a {type(data).__name__}: write a mapping of `key: value` lines"
        )
    return data


class SpecFile(BaseModel):
    """A spec as the YAML file the run folder keeps and every worker reads."""

    model_config = ConfigDict(extra="forbid")

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)

    def write(self, path: str | Path) -> Path:
        return write_text(path, self.to_yaml())  # whole or absent, however the process ends
