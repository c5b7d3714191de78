"""Writes the calculator tasks: seeded arithmetic questions with exact answers.

python examples/calculator/make_data.py [--seed 0] [--train 200] [--test 50]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

OPS = ["+", "-", "*"]


def question(rng: random.Random) -> tuple[str, int]:
    if rng.random() < 0.7:
        a, b = rng.randint(10, 999), rng.randint(10, 99)
        op = rng.choice(OPS)
        expr = f"{a} {op} {b}"
    else:
        a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 20)
        expr = f"({a} {rng.choice(OPS)} {b}) {rng.choice(OPS)} {c}"
    value = _value(expr)
    return f"What is {expr}?", value


def _value(expr: str) -> int:
    from aworld_train.env.calculator import evaluate

    return int(evaluate(expr))


def rows(n: int, rng: random.Random, prefix: str) -> list[dict]:
    out = []
    for i in range(n):
        prompt, answer = question(rng)
        out.append(
            {"id": f"{prefix}-{i}", "prompt": prompt, "ground_truth": answer, "data_source": "calculator"}
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train", type=int, default=200)
    parser.add_argument("--test", type=int, default=50)
    parser.add_argument("--out", default=str(Path(__file__).parent))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    for name, n in (("train", args.train), ("test", args.test)):
        path = Path(args.out) / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows(n, rng, name)))
        print(f"wrote {n} rows to {path}")


if __name__ == "__main__":
    main()
