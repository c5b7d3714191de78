"""Settings from `.env` files, as AWorld's users keep them (API keys, server URLs).

Read with python-dotenv into the process environment, never into a file we write: the real
environment wins, then the working folder's `.env`, then the one beside the config. Generated
files keep `${VAR}` references (ARCHITECTURE.md invariant 4), so a value read here reaches
workers only through their environment.
"""

from __future__ import annotations

import os
from pathlib import Path

from dotenv import dotenv_values
from dotenv.parser import parse_stream

from aworld_train.core.errors import ConfigError


def env_files(config_path: str | Path | None = None) -> list[Path]:
    """The `.env` files that apply, strongest first."""
    candidates = [Path.cwd() / ".env"]
    if config_path is not None:
        candidates.append(Path(config_path).resolve().parent / ".env")
    found: list[Path] = []
    for path in candidates:
        if path.is_file() and path.resolve() not in {p.resolve() for p in found}:
            found.append(path)
    return found


def load_env_files(config_path: str | Path | None = None) -> dict[str, str]:
    """Set the variables of the applicable `.env` files that the environment lacks; those set."""
    loaded: dict[str, str] = {}
    for path in env_files(config_path):
        refuse_unparsed_lines(path)
        for key, value in dotenv_values(path).items():
            if value is not None and key not in os.environ:
                os.environ[key] = loaded[key] = value
    return loaded


def refuse_unparsed_lines(path: Path) -> None:
    """A line python-dotenv cannot parse would be skipped with a warning that names no file; the
    variable it meant to set would then be missing."""
    with path.open(encoding="utf-8") as stream:
        for binding in parse_stream(stream):
            if binding.error:
                line = binding.original.string.strip()
                raise ConfigError(
                    f"{path} line {binding.original.line}: {line!r} is not a setting: write KEY=value "
                    "(quote a value with spaces or #), or start the line with # to comment it out"
                )
