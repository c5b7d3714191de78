"""What a user wrote, read with errors that name the key or file and the fix: YAML files holding a
mapping, pydantic's validation errors, and specs kept as YAML files. Ground floor: the config and
the agent specs use it."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from aworld_train.errors import ConfigError


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


def explain_validation(error: ValidationError, root: type[BaseModel], noun: str = "config") -> str:
    """pydantic's errors as ours: one line each, naming the key, with a "did you mean" or the fix."""
    lines = []
    for item in error.errors():
        loc = tuple(item["loc"])
        where = ".".join(str(p) for p in loc)
        if item["type"] == "extra_forbidden":
            hint = did_you_mean(loc[-1], _fields_at(loc[:-1], root))
            lines.append(f"unknown {noun} key '{where}'{hint}; remove it or fix its spelling")
        elif not loc:
            lines.append(f"{noun}: {item['msg']} (got {type(item.get('input')).__name__}): write a mapping")
        else:
            msg = item["msg"].removeprefix("Value error, ")
            fix = _FIXES.get(item["type"], "")
            fix = f": {fix.format(**item.get('ctx', {}))}" if fix else ""
            lines.append(f"{noun} field '{where}': {msg} (got {item.get('input')!r}){fix}")
    return "\n".join(lines)


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
        data = yaml.safe_load(path.read_text()) or {}
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
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_yaml())
        return path
