"""Write the BFCL multi-turn datasets of the curriculum from the installed bfcl-eval package.

python examples/bfcl/make_data.py [--out examples/bfcl/data] [--seed 0] [--train-size 400]

train.jsonl      400 entries of base, miss_func, miss_param and long_context (seeded, by category)
train_base.jsonl the base entries of train.jsonl (stage 2)
test.jsonl       the other entries, held out
test_base.jsonl  the base entries of test.jsonl
train_local.jsonl, test_local.jsonl  a few base entries with one environment class and the
                 fewest turns, for the local backend's small model, context and CPU
"""

from __future__ import annotations

import argparse
from collections import Counter

from aworld_train.env.bfcl.data import TRAIN_SIZE, build_rows, split, write_jsonl


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="examples/bfcl/data")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-size", type=int, default=TRAIN_SIZE)
    args = parser.parse_args(argv)
    train, test = split(build_rows(), args.train_size, args.seed)
    for name, rows in (("train", train), ("test", test)):
        write_jsonl(rows, f"{args.out}/{name}.jsonl")
        write_jsonl([r for r in rows if r["category"] == "base"], f"{args.out}/{name}_base.jsonl")
        print(f"{name}: {len(rows)} rows {dict(Counter(r['category'] for r in rows))}")
    for name, rows, count in (("train", train, 16), ("test", test, 8)):
        small = [r for r in rows if r["category"] == "base" and len(r["involved_classes"]) == 1]
        small = sorted(small, key=lambda r: len(r["prompt"]))[:count]  # fewest turns first
        write_jsonl(small, f"{args.out}/{name}_local.jsonl")
    print(f"written to {args.out}/")


if __name__ == "__main__":
    main()
