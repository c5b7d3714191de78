"""The object a user's reference names ('package.module:name' or 'path/to/file.py:name': an agent
factory, a reward function), imported with an error that says what to fix."""

from __future__ import annotations

import difflib
import importlib
import importlib.util
from pathlib import Path
from typing import Any

from aworld_train.core.errors import AgentSpecError


def import_object(reference: str, what: str) -> Any:
    """'package.module:attr' or 'path/to/file.py:attr' -> the object."""
    if ":" not in reference:
        raise AgentSpecError(f"{what} {reference!r} must look like 'module:name' or 'path/to/file.py:name'")
    module_name, _, attr = reference.rpartition(":")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise FileNotFoundError(f"file {module_name!r} does not exist")
            spec = importlib.util.spec_from_file_location(f"_aworld_train_user_{path.stem}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except FileNotFoundError as exc:
        raise AgentSpecError(
            f"{what} {reference!r}: cannot import {module_name!r} ({exc}): check the path (relative to "
            "the working folder)"
        ) from exc
    except ModuleNotFoundError as exc:
        if exc.name is None or not module_name.startswith(exc.name):  # one of its own imports
            raise AgentSpecError(
                f"{what} {reference!r}: importing {module_name!r} raised ModuleNotFoundError: {exc}"
                f"{_raised_at(exc)}: install {exc.name}, or fix that import"
            ) from exc
        raise AgentSpecError(
            f"{what} {reference!r}: cannot import {module_name!r} ({type(exc).__name__}: {exc}): check "
            "the module's name, and that its package is installed or on PYTHONPATH"
        ) from exc
    except Exception as exc:  # the module itself raised while it was imported: show where
        raise AgentSpecError(
            f"{what} {reference!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
            f"{_raised_at(exc)}: fix the error there"
        ) from exc
    if not hasattr(module, attr):
        names = [n for n in dir(module) if not n.startswith("_")]
        close = difflib.get_close_matches(attr, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise AgentSpecError(f"{what} {reference!r}: {module_name!r} has no attribute {attr!r}{hint}")
    return getattr(module, attr)


def _raised_at(exc: BaseException) -> str:
    """` (at FILE, line N)`: the last frame of the traceback outside the import machinery."""
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "importlib" not in f.filename]
    frame = frames[-1] if frames else None
    return f" (at {frame.filename}, line {frame.lineno})" if frame and frame.filename != __file__ else ""
