"""Writes the story-problem tasks of the team example: a short story of 1 to 3 changes to a count,
whose answer needs the story read as arithmetic (the reader's skill) and that arithmetic computed
with the calculator tool (the calculator agent's skill).

python examples/story_team/make_data.py [--seed 0] [--train 400] [--test 100]
"""

from __future__ import annotations

import random
from pathlib import Path

from aworld_train.inputs.task_splits import write_splits

NAMES = ["Ann", "Ben", "Cara", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun"]
THINGS = ["apples", "coins", "stamps", "marbles", "books", "shells", "cards", "pens"]
GAINS = ["{who} gets {n} more.", "{who} buys {n} more.", "{who} finds {n} more."]
LOSSES = ["{who} gives away {n}.", "{who} loses {n}.", "{who} sells {n}."]
TIMES = ["{who} then has {n} times as many.", "The number grows {n} times."]
LENGTHS = (1, 2, 2, 3)


def _change(rng: random.Random, value: int) -> tuple[str, str, int]:
    """(sentence template, operator, operand) of one change to a count of `value`."""
    kind = rng.choice("+-*")
    if kind == "*":
        return rng.choice(TIMES), "*", rng.randint(2, 5)
    if kind == "-" and value > 2:
        return rng.choice(LOSSES), "-", rng.randint(1, min(value - 1, 40))
    return rng.choice(GAINS), "+", rng.randint(2, 40)


def story(rng: random.Random, length: int) -> tuple[str, str, int]:
    """(the story, its expression nested from the left, the count at the end)."""
    who, things = rng.choice(NAMES), rng.choice(THINGS)
    value = rng.randint(3, 60)
    sentences, expression = [f"{who} has {value} {things}."], str(value)
    for i in range(length):
        sentence, op, n = _change(rng, value)
        sentences.append(sentence.format(who=who, n=n))
        expression = f"{expression} {op} {n}" if i == 0 else f"({expression}) {op} {n}"
        value = {"+": value + n, "-": value - n, "*": value * n}[op]
    sentences.append(f"How many {things} does {who} have now?")
    return " ".join(sentences), expression, value


def rows(n: int, rng: random.Random, prefix: str) -> list[dict]:
    out = []
    for i in range(n):
        text, expression, answer = story(rng, rng.choice(LENGTHS))
        out.append(
            {
                "id": f"{prefix}-{i}",
                "prompt": text,
                "ground_truth": answer,
                "data_source": "story_team",
                "extra_info": {"expression": expression},
            }
        )
    return out


def main() -> None:
    write_splits(rows, Path(__file__).parent, train=400, test=100)


if __name__ == "__main__":
    main()
