"""AgentGym's data as our rows.

AgentGym names a task by its item id, `<env>_<index>` (`textcraft_12`): its task lists are
JSON lists of `{"item_id": ..., "conversations": []}` (or of bare ids or indices), and its
trajectory files (AgentTraj) hold the same records with `conversations`, a list of
`{"from": "human"|"gpt", "value": ..., "loss": ...}` turns: a preamble (the environment's
instructions and the model's "OK"), then the task, then actions and observations.

A row keeps the item id as its `id` (the agentgym bridge resets the environment to that
item), the task as its `prompt`, and `ground_truth: null` (the environment holds the truth:
`aworld_train.rewards.agentgym:env_reward`). Rows from trajectories also keep the
`conversations` and the `actions` taken. Where a task list gives no task text, the task is
read from an AgentGym server (`--server`) or the prompt asks the agent to read it with the
`instruction` tool.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from pathlib import Path
from typing import Any

from aworld_train.core.errors import DatasetError

ASK_INSTRUCTION = "Call the instruction tool to read your task, then solve it with the act tool."
_ACTION = re.compile(r"Action:\s*(.*?)\s*(?:\n|$)", re.S)
_INDEX = re.compile(r"(\d+)$")


def item_id(record: Any, env: str, index: int) -> str:
    """The record's AgentGym item id: `item_id`/`id` of a dict, or a bare id or index."""
    value = record.get("item_id", record.get("id")) if isinstance(record, dict) else record
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{env}_{value}"
    if isinstance(value, str) and _INDEX.search(value.strip()):
        return value.strip()
    raise DatasetError(
        f"AgentGym record {index}: no item id (give 'item_id' like '{env}_12', or the index 12); got {record!r:.120}"
    )


def _turns(conversations: Any, index: int) -> list[dict[str, str]]:
    if not isinstance(conversations, list) or not all(
        isinstance(t, dict) and "from" in t and "value" in t for t in conversations
    ):
        raise DatasetError(
            f"AgentGym record {index}: 'conversations' must be a list of {{'from': 'human'|'gpt', 'value': ...}}"
        )
    return conversations


def task_text(conversations: list[dict[str, Any]]) -> str | None:
    """The task in an AgentGym conversation: the first human turn after the preamble pair
    (human instructions, gpt "OK"), or the only human turn there is."""
    humans = [i for i, t in enumerate(conversations) if t["from"] == "human"]
    if not humans:
        return None
    if len(conversations) > 2 and conversations[1]["from"] == "gpt" and len(humans) > 1:
        return str(conversations[humans[1]]["value"])
    return str(conversations[humans[0]]["value"])


def actions_of(conversations: list[dict[str, Any]]) -> list[str]:
    """The action of each model turn after the task (`Action: ...`, AgentGym's ReAct format)."""
    start = next(
        (
            i
            for i, t in enumerate(conversations)
            if t["from"] == "human" and t["value"] == task_text(conversations)
        ),
        0,
    )
    found = []
    for turn in conversations[start + 1 :]:
        if turn["from"] == "gpt":
            matches = _ACTION.findall(str(turn["value"]))
            if matches:
                found.append(matches[-1].strip())
    return found


def to_rows(
    records: list[Any], env: str, instructions: dict[str, str] | None = None, source: str | None = None
) -> list[dict[str, Any]]:
    """AgentGym task-list or trajectory records -> our rows (one per record, in order)."""
    rows = []
    for index, record in enumerate(records):
        rid = item_id(record, env, index)
        row: dict[str, Any] = {"id": rid, "ground_truth": None, "data_source": source or f"agentgym/{env}"}
        conversations = record.get("conversations") if isinstance(record, dict) else None
        task = None
        if conversations:
            conversations = _turns(conversations, index)
            task = task_text(conversations)
            row["conversations"] = conversations
            row["actions"] = actions_of(conversations)
        task = task or (instructions or {}).get(rid)
        row["prompt"] = task or ASK_INSTRUCTION
        row["extra_info"] = {"env": env, "item_id": rid, "item": int(_INDEX.search(rid).group(1))}
        rows.append(row)
    return rows


async def fetch_instructions(server: str, env: str, ids: list[str], concurrency: int = 16) -> dict[str, str]:
    """Each item's task as an AgentGym server states it at reset (one environment, reset per item)."""
    from aworld_train.env.agentgym.client import AgentGymClient, EnvError, ServerDown
    from aworld_train.env.agentgym.profiles import profile

    client = AgentGymClient(server, profile(env))
    limit = asyncio.Semaphore(concurrency)

    async def one(rid: str) -> tuple[str, str]:
        async with limit:
            env_id, field = await client.create()
            try:
                first = await client.reset(env_id, field, int(_INDEX.search(rid).group(1)))
            finally:
                await client.close(env_id, field)
            return rid, first.observation

    try:
        return dict(await asyncio.gather(*(one(r) for r in dict.fromkeys(ids))))
    except (ServerDown, EnvError) as exc:
        raise DatasetError(f"reading tasks from the AgentGym {env} server at {server}: {exc}") from exc
    finally:
        await client.aclose()


def read_records(path: str | Path) -> list[Any]:
    """AgentGym's JSON list (or JSONL, one record a line)."""
    path = Path(path)
    records = "an AgentGym task list or trajectory file: a JSON list (or JSONL) of {item_id, conversations}"
    if not path.is_file():
        where = "is a folder" if path.is_dir() else "does not exist"
        raise DatasetError(f"AgentGym file {str(path)!r} {where}: give {records}")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".jsonl":
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"AgentGym file {str(path)!r} is not valid JSON ({exc}): give {records}") from None
    if not isinstance(data, list):
        raise DatasetError(f"AgentGym file {str(path)!r} holds a {type(data).__name__}: give {records}")
    return data


def check_environment(env: str) -> None:
    """`env` names one of AgentGym's environments (its rows' data_source and item ids carry it)."""
    import difflib

    from aworld_train.env.agentgym.profiles import ENVIRONMENTS

    if env.lower() not in ENVIRONMENTS:
        close = difflib.get_close_matches(env.lower(), ENVIRONMENTS, n=1)
        raise DatasetError(
            f"--env {env!r} is not an AgentGym environment"
            + (f" (did you mean {close[0]!r}?)" if close else "")
            + f": choose one of {', '.join(ENVIRONMENTS)}"
        )


def split(rows: list[dict[str, Any]], held_out: float, seed: int) -> tuple[list[dict], list[dict]]:
    """A seeded split by item, so one item never lands on both sides."""
    items = sorted({r["id"] for r in rows})
    random.Random(seed).shuffle(items)
    cut = round(len(items) * (1 - held_out))
    train_ids = set(items[:cut])
    return [r for r in rows if r["id"] in train_ids], [r for r in rows if r["id"] not in train_ids]


def write_jsonl(rows: list[dict[str, Any]], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def convert(
    source: str | Path,
    env: str,
    output: str | Path,
    server: str | None = None,
    held_out: float = 0.0,
    seed: int = 0,
) -> dict[str, int]:
    """`source` (AgentGym JSON/JSONL) -> `output` JSONL rows; with `held_out`, also `<output>.test.jsonl`.
    The counts written."""
    check_environment(env)
    if not 0 <= held_out < 1:
        raise DatasetError(
            f"--held-out {held_out} is not a share of the items: give a number from 0 (no test file) "
            "up to, but not including, 1 (e.g. 0.2)"
        )
    records = read_records(source)
    instructions = None
    if server:
        ids = [item_id(r, env, i) for i, r in enumerate(records)]
        instructions = asyncio.run(fetch_instructions(server, env, ids))
    rows = to_rows(records, env, instructions)
    if not held_out:
        write_jsonl(rows, output)
        return {"rows": len(rows)}
    train, test = split(rows, held_out, seed)
    output = Path(output)
    test_path = output.with_name(output.stem + ".test.jsonl")
    write_jsonl(train, output)
    write_jsonl(test, test_path)
    return {"train": len(train), "test": len(test)}
