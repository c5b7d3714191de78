"""Writes the depot-reports tasks: a depot code and a number of days (3 or 4); the answer is the
crates its reports (env/reports.py, a pure function of depot and day) say it received in total.

python examples/long_reports/make_data.py [--seed 0] [--train 400] [--test 100]

Each report is about 170 tokens, so 3 or 4 of them overflow the examples' 1k-token budget: the
counts read first are needed at the end, after the reports themselves no longer fit.
"""

from __future__ import annotations

import random
import string
from pathlib import Path

from aworld_train.agents.reports import question
from aworld_train.env.reports import report
from aworld_train.inputs.task_splits import write_splits

DAYS = (3, 3, 4)


def rows(n: int, rng: random.Random, prefix: str) -> list[dict]:
    out = []
    for i in range(n):
        depot = f"{rng.choice(string.ascii_uppercase)}{rng.randint(1, 9)}"
        crates = [report(depot, day)[1] for day in range(1, rng.choice(DAYS) + 1)]
        out.append(
            {
                "id": f"{prefix}-{i}",
                "prompt": question(depot, len(crates)),
                "ground_truth": sum(crates),
                "data_source": "reports",
                "extra_info": {"depot": depot, "crates": crates},
            }
        )
    return out


if __name__ == "__main__":
    write_splits(rows, Path(__file__).parent, train=400, test=100)
