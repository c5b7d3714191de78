"""StableToolBench query files -> dataset rows (jsonl) and verl parquet.

One row layout serves both: `id` (`<group>-<query_id>`, which the episode sends as
X-Task-Id), `prompt` (a system message and the query as chat messages),
`data_source: toolbench`, `reward_model: {style: rule, ground_truth}` (JSON text:
the relevant APIs and their function names) and `extra_info: {index, sample_id,
category, group, api_list}` (the api_list as JSON text, so parquet keeps one column
type and the tool server can rebuild the task's tools from the file).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from aworld_train.core.errors import DatasetError
from aworld_train.env.toolbench.catalog import BadRecord, ToolBenchTask, api_list_json, parse_record

DATA_SOURCE = "toolbench"
SYSTEM_PROMPT = (
    "You are a tool-using assistant working on a user's request with real APIs. Call one API at a "
    "time, read its response, and keep going until you can answer. Always end by calling Finish: "
    "return_type 'give_answer' with a complete final_answer, or 'give_up_and_restart' if the APIs "
    "cannot do it."
)


class ConversionError(DatasetError):
    """A query file that cannot be converted; the message names the file and the record."""


def read_records(path: str | Path) -> list[Any]:
    path = Path(path)
    query_file = "give a StableToolBench query file (solvable_queries/test_instruction/G1_instruction.json)"
    if not path.is_file():
        where = "is a folder" if path.is_dir() else "does not exist"
        raise ConversionError(f"--input {str(path)!r} {where}: {query_file}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConversionError(f"--input {str(path)!r} is not a JSON file ({exc}): {query_file}") from None
    if not isinstance(data, list):
        raise ConversionError(
            f"--input {str(path)!r} holds a {type(data).__name__}, not a list of records with query, "
            f"query_id and api_list: {query_file}"
        )
    return data


def to_row(task: ToolBenchTask, index: int, group: str) -> dict[str, Any]:
    categories = [api.category for api in task.apis if (api.tool, api.api) in set(task.relevant)]
    truth = {
        "relevant_apis": [list(pair) for pair in task.relevant],
        "relevant_functions": task.relevant_functions(),
    }
    return {
        "id": f"{group}-{task.query_id}",
        "prompt": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task.query}],
        "data_source": DATA_SOURCE,
        "reward_model": {"style": "rule", "ground_truth": json.dumps(truth)},
        "extra_info": {
            "index": index,
            "sample_id": task.query_id,
            "category": (categories or [task.apis[0].category])[0],
            "group": group,
            "api_list": api_list_json(task),
        },
    }


def convert(records: list[Any], group: str, max_samples: int | None = None) -> list[dict[str, Any]]:
    """Rows for the first `max_samples` records (all by default); BadRecord names a bad one."""
    if max_samples is not None and max_samples < 1:
        raise ConversionError(f"--max_samples must be 1 or more, not {max_samples}")
    chosen = records[:max_samples] if max_samples else records
    rows, seen = [], {}
    for index, record in enumerate(chosen):
        row = to_row(parse_record(record, index), index, group)
        if row["id"] in seen:
            raise BadRecord(
                f"record {index} repeats query_id {row['extra_info']['sample_id']} of record {seen[row['id']]}: "
                "query ids identify tasks, so each must be unique in a file"
            )
        seen[row["id"]] = index
        rows.append(row)
    if not rows:
        raise ConversionError("the input holds no records")
    return rows


def split(
    rows: list[dict[str, Any]], train_ratio: float, seed: int = 0
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A seeded shuffle cut at `train_ratio`; both parts keep at least one row."""
    if not 0 < train_ratio < 1:
        raise ConversionError(f"--train_ratio must be between 0 and 1 (exclusive), not {train_ratio}")
    if len(rows) < 2:
        raise ConversionError(f"--split needs at least 2 records, the input has {len(rows)}")
    shuffled = list(rows)
    random.Random(seed).shuffle(shuffled)
    cut = min(max(round(len(rows) * train_ratio), 1), len(rows) - 1)
    return shuffled[:cut], shuffled[cut:]


def write_rows(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """`.jsonl` or `.json` for our datasets, `.parquet` for verl (same columns)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    elif suffix == ".json":
        path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    elif suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        raise ConversionError(f"output {str(path)!r}: use a .parquet, .jsonl or .json file name")
    return path


def run(
    input_path: str | Path,
    output: str | Path | None = None,
    do_split: bool = False,
    train_output: str | Path | None = None,
    val_output: str | Path | None = None,
    train_ratio: float = 0.9,
    max_samples: int | None = None,
    group: str | None = None,
    seed: int = 0,
) -> dict[str, int]:
    """The `aworld-train data toolbench` command: file counts by output path."""
    source = Path(input_path)
    group = group or source.stem
    try:
        rows = convert(read_records(source), group, max_samples)
    except BadRecord as exc:
        raise ConversionError(
            f"{source}: {exc}; fix that record or leave it out (StableToolBench's query records hold "
            "query, query_id and api_list)"
        ) from None
    if not do_split:
        if train_output or val_output:
            raise ConversionError("--train_output and --val_output go with --split; without it use --output")
        target = write_rows(rows, output or source.with_suffix(".parquet"))
        return {str(target): len(rows)}
    if output:
        raise ConversionError("--output does not go with --split; use --train_output and --val_output")
    train, val = split(rows, train_ratio, seed)
    a = write_rows(train, train_output or source.with_name(f"{source.stem}_train.parquet"))
    b = write_rows(val, val_output or source.with_name(f"{source.stem}_val.parquet"))
    return {str(a): len(train), str(b): len(val)}
