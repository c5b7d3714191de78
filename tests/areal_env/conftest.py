"""Tests that import AReaL 1.0.4 itself. They run in AReaL's own environment (`make test` runs
them with .venv-areal's Python; `make setup-areal` builds it); elsewhere they are not collected."""

import importlib.util

if importlib.util.find_spec("areal") is None:
    collect_ignore_glob = ["test_*.py"]
