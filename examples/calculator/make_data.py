"""Writes the calculator tasks: seeded arithmetic questions with exact answers.

python examples/calculator/make_data.py [--seed 0] [--train 200] [--test 50]
"""

from __future__ import annotations

import random
from pathlib import Path

from aworld_train.inputs.task_splits import write_splits

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
    write_splits(rows, Path(__file__).parent, train=200, test=50)


if __name__ == "__main__":
    main()
