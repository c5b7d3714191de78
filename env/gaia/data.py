"""GAIA's `metadata.jsonl` layout into dataset rows.

A GAIA split is a folder holding `metadata.jsonl` (task_id, Question, Level, Final answer,
file_name) beside the attached files. Each task becomes a row with `prompt` (the question,
naming its attachment), `ground_truth`, `task_id`, `level`, `file_name` and
`data_source: gaia`. The documents server reads the attachments from the same folder:
point `GAIA_FILES_DIR` at it (`attachments_dir` returns it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aworld_train.core.errors import DatasetError

METADATA = "metadata.jsonl"
REQUIRED = ("task_id", "Question", "Final answer")


def metadata_path(path: str | Path) -> Path:
    """`path` itself if it is a metadata file, else the one metadata.jsonl under the folder."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise DatasetError(f"GAIA data {str(path)!r} does not exist; pass a split folder or its {METADATA}")
    found = sorted(path.rglob(METADATA))
    if len(found) != 1:
        where = ", ".join(str(p.parent) for p in found) or "none"
        raise DatasetError(
            f"GAIA data {str(path)!r} must hold exactly one {METADATA} (found: {where}); "
            "pass the split folder, e.g. .../2023/validation"
        )
    return found[0]


def attachments_dir(path: str | Path) -> Path:
    return metadata_path(path).parent.resolve()


def _row(task: dict[str, Any], folder: Path, line: int) -> dict[str, Any]:
    missing = [key for key in REQUIRED if key not in task]
    if missing:
        raise DatasetError(f"{folder / METADATA} line {line}: missing {', '.join(missing)}")
    question = str(task["Question"]).strip()
    file_name = str(task.get("file_name") or "")
    if file_name:
        if not (folder / file_name).is_file():
            raise DatasetError(
                f"{folder / METADATA} line {line}: task {task['task_id']} attaches {file_name!r}, "
                f"which is not in {folder}"
            )
        question += f"\n\nAttached file: {file_name}"
    return {
        "prompt": question,
        "ground_truth": str(task["Final answer"]),
        "task_id": str(task["task_id"]),
        "level": int(task.get("Level") or 0),
        "file_name": file_name,
        "data_source": "gaia",
    }


def load_gaia(path: str | Path, levels: list[int] | None = None) -> list[dict[str, Any]]:
    """Rows of the GAIA split at `path` (a folder or its metadata.jsonl), optionally by level."""
    meta = metadata_path(path)
    rows = []
    for line, text in enumerate(meta.read_text(encoding="utf-8").splitlines(), 1):
        if not text.strip():
            continue
        try:
            task = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{meta} line {line} is not JSON: {exc}") from None
        row = _row(task, meta.parent, line)
        if levels is None or row["level"] in levels:
            rows.append(row)
    if not rows:
        raise DatasetError(f"{meta} has no tasks" + (f" at levels {levels}" if levels else ""))
    return rows
