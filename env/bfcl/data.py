"""Dataset rows from BFCL's multi-turn categories, and the seeded train/held-out split.

A row: `id` (the BFCL entry id, which the episode sends as X-Task-Id), `prompt`
(one user message per BFCL turn), `ground_truth` (the possible-answer calls per
turn, as JSON text so parquet keeps one column type), `category`,
`involved_classes`, `data_source` and `extra_info`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from aworld_train.env.bfcl import catalog

DATA_SOURCE = "bfcl_multi_turn"
TRAIN_SIZE = 400  # the Environment Tuning recipe's training set


def build_rows(categories: tuple[str, ...] | list[str] = catalog.CATEGORIES) -> list[dict[str, Any]]:
    rows = []
    for category in categories:
        for entry in catalog.entries(category):
            rows.append(
                {
                    "id": entry["id"],
                    "prompt": catalog.user_turns(entry),
                    "ground_truth": json.dumps(catalog.possible_answer(entry["id"])),
                    "category": category,
                    "involved_classes": list(entry["involved_classes"]),
                    "data_source": DATA_SOURCE,
                    "extra_info": {"entry_id": entry["id"], "category": category},
                }
            )
    return rows


def split(
    rows: list[dict[str, Any]], train_size: int = TRAIN_SIZE, seed: int = 0
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A seeded split, stratified by category: the train set has each category's share of `train_size`."""
    if not 0 < train_size < len(rows):
        raise ValueError(
            f"train_size must be between 1 and {len(rows) - 1} for {len(rows)} rows, not {train_size}"
        )
    by_category: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_category.setdefault(row["category"], []).append(row)
    rng = random.Random(seed)
    train, held_out = [], []
    remaining = train_size
    for index, (_, group) in enumerate(sorted(by_category.items())):
        group = list(group)
        rng.shuffle(group)
        left = len(by_category) - index
        take = remaining if left == 1 else round(train_size * len(group) / len(rows))
        train.extend(group[:take])
        held_out.extend(group[take:])
        remaining -= take
    return train, held_out


def write_jsonl(rows: list[dict[str, Any]], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path
