"""Datasets: jsonl/json/parquet files, lists of dicts or `datasets.Dataset`, checked up front.

A row needs a prompt and a ground truth. The prompt is a string (one user
turn), a list of strings (several user turns, given one after the other), or a
list of chat messages (an optional system message, then user messages, each one
a turn). The ground truth is the `answer_key` column or verl's
`reward_model.ground_truth`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aworld_train.core.errors import DatasetError
from aworld_train.rollout.episodes.trajectory import Task


def read_rows(source: Any, what: str = "dataset") -> list[dict[str, Any]]:
    if source is None:
        raise DatasetError(f"{what} is missing: pass a jsonl/json/parquet path or a list of dicts")
    if isinstance(source, str | Path):
        return _read_file(Path(source), what)
    if isinstance(source, list):
        bad = next((i for i, row in enumerate(source) if not isinstance(row, dict)), None)
        if bad is not None:
            raise DatasetError(
                f"{what}: row {bad} is a {type(source[bad]).__name__}, not a dict: give each row as a "
                "mapping with a prompt and a ground_truth"
            )
        return [dict(row) for row in source]
    if hasattr(source, "to_list") and hasattr(source, "column_names"):  # datasets.Dataset
        return [dict(row) for row in source.to_list()]
    raise DatasetError(
        f"{what} must be a file path, a list of dicts or a datasets.Dataset, not {type(source).__name__}"
    )


def _read_file(path: Path, what: str) -> list[dict[str, Any]]:
    if not path.is_file():
        where = "is a folder" if path.is_dir() else "does not exist"
        raise DatasetError(
            f"{what} file {str(path)!r} {where}: give the path of a .jsonl, .json or .parquet file"
        )
    suffix = path.suffix.lower()
    try:
        if suffix == ".jsonl":
            rows = _read_jsonl(path, what)
        elif suffix == ".json":
            data = json.loads(_utf8(path, what))
            rows = data if not isinstance(data, dict) else data.get("data", data.get("rows", data))
        elif suffix == ".parquet":
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
        else:
            raise DatasetError(f"{what} file {str(path)!r}: use .jsonl, .json or .parquet")
    except json.JSONDecodeError as exc:
        raise DatasetError(
            f"{what} file {str(path)!r} is not JSON ({exc}): it must hold a list of row objects"
        ) from None
    except OSError as exc:
        raise DatasetError(
            f"{what} file {str(path)!r} cannot be read ({exc.strerror}): check its permissions"
        ) from None
    if not isinstance(rows, list):
        raise DatasetError(
            f"{what} file {str(path)!r} holds a {type(rows).__name__}: it must hold a list of row objects "
            '(or {"data": [...]})'
        )
    if not rows:
        raise DatasetError(
            f"{what} file {str(path)!r} has no rows: add rows (one JSON object each) or point to another file"
        )
    return read_rows(rows, what)


def _utf8(path: Path, what: str) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise DatasetError(
            f"{what} file {str(path)!r} is not UTF-8 text (line {line}, byte {exc.start}): save it as UTF-8"
        ) from None


def _read_jsonl(path: Path, what: str) -> list[Any]:
    rows = []
    for number, line in enumerate(_utf8(path, what).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise DatasetError(
                f"{what} file {str(path)!r} line {number}: {exc.msg} at column {exc.colno}: "
                f"each line must be one JSON object"
            ) from None
    return rows


def _ground_truth(row: dict[str, Any], answer_key: str) -> tuple[bool, Any]:
    if answer_key in row:
        return True, row[answer_key]
    reward_model = row.get("reward_model")
    if isinstance(reward_model, dict) and "ground_truth" in reward_model:
        return True, reward_model["ground_truth"]
    return False, None


def _turns(prompt: Any) -> tuple[str | None, list[str]]:
    if isinstance(prompt, str):
        return None, [prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        return None, list(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(p, dict) for p in prompt):
        system = None
        turns = []
        for message in prompt:
            role, content = message.get("role"), message.get("content")
            if role == "system" and system is None and not turns:
                system = content
            elif role == "user" and isinstance(content, str):
                turns.append(content)
            else:
                raise ValueError(
                    f"messages may be one system message then user messages; found role {role!r}"
                )
        if turns:
            return system, turns
    raise ValueError("must be a string, a list of strings, or a list of {role, content} messages")


def _check_turns(turns: list[str]) -> None:
    empty = next((i for i, turn in enumerate(turns) if not turn.strip()), None)
    if empty is not None:
        raise ValueError(f"user turn {empty} is empty: give every turn some text")


def to_tasks(
    rows: list[dict[str, Any]], prompt_key: str, answer_key: str, what: str = "dataset"
) -> list[Task]:
    if not rows:
        raise DatasetError(f"{what} has no rows: pass at least one row with a prompt and a ground_truth")
    tasks = []
    for index, row in enumerate(rows):
        if prompt_key not in row:
            raise DatasetError(
                f"{what} row {index} has no '{prompt_key}' column (columns: {', '.join(sorted(row))}); "
                f"rename the column or set data.prompt_key"
            )
        found, truth = _ground_truth(row, answer_key)
        if not found:
            raise DatasetError(
                f"{what} row {index} has no '{answer_key}' column (columns: {', '.join(sorted(row))}); "
                f"rename the column or set data.answer_key"
            )
        try:
            system, turns = _turns(row[prompt_key])
            _check_turns(turns)
        except ValueError as exc:
            raise DatasetError(f"{what} row {index}: '{prompt_key}' {exc}") from None
        task_id = str(row.get("id", row.get("task_id", index)))
        extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
        tasks.append(
            Task(
                id=task_id,
                user_turns=turns,
                ground_truth=truth,
                system=system,
                data_source=str(row.get("data_source", "aworld_train")),
                extra_info=extra,
                row=row,
            )
        )
    return tasks


def load_tasks(
    source: Any, prompt_key: str = "prompt", answer_key: str = "ground_truth", what: str = "dataset"
) -> list[Task]:
    return to_tasks(read_rows(source, what), prompt_key, answer_key, what)
