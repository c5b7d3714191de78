"""The command line of a generated task set (`examples/*/make_data.py`): a seed, the sizes of the
train and test splits and a folder; each split written as JSONL rows from one seeded generator, so
that the same seed always gives the same tasks."""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from pathlib import Path

# rows(n, rng, split name) -> n task rows; the split name prefixes their ids
RowMaker = Callable[[int, random.Random, str], list[dict]]


def write_splits(rows: RowMaker, folder: Path, train: int, test: int, argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train", type=int, default=train, help="tasks in train.jsonl")
    parser.add_argument("--test", type=int, default=test, help="tasks in test.jsonl")
    parser.add_argument("--out", default=str(folder), help="the folder the two files go to")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for name, n in (("train", args.train), ("test", args.test)):
        path = Path(args.out) / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows(n, rng, name)))
        print(f"wrote {n} rows to {path}")
