"""Where the tests find AReaL 1.0.4: its own environment, which cannot share ours (its torch,
transformers and Hydra pins). `make setup-areal` builds it as .venv-areal; AWORLD_TRAIN_AREAL_PYTHON
names another one. Without it, the AReaL tests skip with the line below."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_DEFAULT = ROOT / ".venv-areal" / "bin" / "python"
AREAL_PYTHON = os.environ.get("AWORLD_TRAIN_AREAL_PYTHON") or (str(_DEFAULT) if _DEFAULT.is_file() else None)
HOW = "no AReaL environment: `make setup-areal` builds .venv-areal (or set AWORLD_TRAIN_AREAL_PYTHON)"

needs_areal = pytest.mark.skipif(not AREAL_PYTHON, reason=HOW)
