"""Where aworld-train keeps its cache (converted models, AWorld's logs)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """`$AWORLD_TRAIN_CACHE`, else `$XDG_CACHE_HOME/aworld-train`, else `~/.cache/aworld-train`."""
    explicit = os.environ.get("AWORLD_TRAIN_CACHE")
    if explicit:
        path = Path(explicit)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        path = Path(base) / "aworld-train"
    path.mkdir(parents=True, exist_ok=True)
    return path
