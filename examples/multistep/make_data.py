"""Writes the multi-step arithmetic tasks: chains of 2 to 4 operations applied left to right, each
on the result of the one before, with every intermediate value (`extra_info.steps`) for the
per-turn reward.

python examples/multistep/make_data.py [--seed 0] [--train 400] [--test 100]

A question reads 'What is 17 + 25 * 3 - 40, computed left to right?': the multistep tool computes one
operation per call, so the agent needs one call per operation, each taking the last result as an
argument (17 + 25 = 42, then 42 * 3, then 126 - 40).
"""

from __future__ import annotations

import random
from pathlib import Path

from aworld_train.inputs.task_splits import write_splits

# Operations on the running value: multipliers stay small so that no result outgrows what a small
# model copies reliably, and subtraction never goes below zero.
LENGTHS = (2, 2, 2, 3, 3, 4)  # more short chains: the ones a starting model finishes


def _operation(rng: random.Random, value: int) -> tuple[str, int]:
    op = rng.choice("+-*")
    if op == "*":
        return op, rng.randint(2, 9)
    if op == "-" and value > 2:
        return op, rng.randint(1, min(value - 1, 60))
    return "+", rng.randint(2, 60)


def chain(rng: random.Random, length: int) -> tuple[str, list[int]]:
    """An expression of `length` operations applied left to right, and the value after each."""
    value = rng.randint(2, 60)
    text, steps = str(value), []
    for _ in range(length):
        op, operand = _operation(rng, value)
        value = {"+": value + operand, "-": value - operand, "*": value * operand}[op]
        text = f"{text} {op} {operand}"
        steps.append(value)
    return text, steps


def question(expression: str) -> str:
    return f"What is {expression}, computed left to right?"


def rows(n: int, rng: random.Random, prefix: str) -> list[dict]:
    out = []
    for i in range(n):
        expression, steps = chain(rng, rng.choice(LENGTHS))
        out.append(
            {
                "id": f"{prefix}-{i}",
                "prompt": question(expression),
                "ground_truth": steps[-1],
                "data_source": "multistep",
                "extra_info": {"expression": expression, "steps": steps},
            }
        )
    return out


def main() -> None:
    write_splits(rows, Path(__file__).parent, train=400, test=100)


if __name__ == "__main__":
    main()
