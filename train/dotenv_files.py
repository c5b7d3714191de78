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
        for key, value in dotenv_values(path).items():
            if value is not None and key not in os.environ:
                os.environ[key] = loaded[key] = value
    return loaded
