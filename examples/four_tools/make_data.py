"""Writes the four-tool assistant's tasks: train.jsonl and test.jsonl (seeded, disjoint).

Each row: `id`, `conversation` (user messages, one per turn), `ground_truth` (per turn, the
calls it needs and the answer it expects; see aworld_train.rewards.four_tools), `data_source`.
Tasks need no tool, one tool, or several tools over several turns. Weather and time
answers come from the same deterministic tools the server runs, keyed by the row id.

python examples/four_tools/make_data.py [--train N] [--test N] [--seed S]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from aworld_train.env.four_tools import tools
from aworld_train.env.four_tools.corpus import DOCUMENTS

HERE = Path(__file__).parent
CITIES = (
    "Oslo",
    "Rome",
    "Lima",
    "Cairo",
    "Quito",
    "Seoul",
    "Porto",
    "Dakar",
    "Hanoi",
    "Perth",
    "Riga",
    "Tunis",
)
GREETINGS = (
    "Hi there! How are you today?",
    "Thanks a lot for your help earlier.",
    "Good morning! Who are you?",
    "Can you say hello to my friend Ana?",
    "Tell me a short fun fact-free greeting.",
)
# (question, words to search with, expected number) from the corpus
FACTS = (
    ("How tall is the Eiffel Tower in metres?", "Eiffel Tower", "330"),
    ("How high is Mount Everest in metres?", "Mount Everest", "8849"),
    ("How many bones does an adult human have?", "human bones", "206"),
    ("How many keys does a standard piano have?", "piano keys", "88"),
    ("How deep is Lake Baikal in metres?", "Lake Baikal", "1642"),
    ("How long is an Olympic swimming pool in metres?", "Olympic pool", "50"),
    ("How many squares does a chess board have?", "chess board", "64"),
    ("In which year was Python first released?", "Python language", "1991"),
)
assert all(any(w.lower() in (t + " " + x).lower() for t, x in DOCUMENTS) for _, w, _ in FACTS)


def turn(calls: list[dict] | None = None, answer: str | None = None) -> dict:
    return {"calls": calls or [], "answer": answer}


def arithmetic(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    op = rng.choice(["+", "-", "*"])
    expression = f"{a} {op} {b}"
    return expression, tools.calculate(expression)


def no_tool(task_id: str, rng: random.Random) -> tuple[list[str], list[dict]]:
    return [rng.choice(GREETINGS)], [turn()]


def calc(task_id: str, rng: random.Random) -> tuple[list[str], list[dict]]:
    expression, value = arithmetic(rng)
    return [f"What is {expression}?"], [
        turn([{"name": "calculator", "arguments": {"expression": expression}}], value)
    ]


def weather(task_id: str, rng: random.Random) -> tuple[list[str], list[dict]]:
    city, day = rng.choice(CITIES), f"2025-07-{rng.randint(1, 28):02d}"
    report = tools.weather(city, day, task_id)
    conversation = [f"What is the temperature in {city} on {day}?"]
    truth = [
        turn(
            [{"name": "weather_query", "arguments": {"city": city, "date": day}}],
            str(report["temperature_c"]),
        )
    ]
    return conversation, truth


def current_time(task_id: str, rng: random.Random) -> tuple[list[str], list[dict]]:
    conversation = [rng.choice(["What time is it now?", "Can you tell me the current time?"])]
    truth = [turn([{"name": "get_current_time", "arguments": {}}], tools.clock(task_id).strftime("%H:%M"))]
    return conversation, truth


def search(task_id: str, rng: random.Random) -> tuple[list[str], list[dict]]:
    question, words, value = rng.choice(FACTS)
    return [question], [turn([{"name": "search", "arguments": {"query": words}}], value)]


def weather_then_calc(task_id: str, rng: random.Random) -> tuple[list[str], list[dict]]:
    """Two turns, the second uses the first's result."""
    city, day = rng.choice(CITIES), f"2025-07-{rng.randint(1, 28):02d}"
    celsius = tools.weather(city, day, task_id)["temperature_c"]
    add = rng.randint(2, 15)
    conversation = [
        f"What is the temperature in {city} on {day}?",
        f"What is that temperature plus {add}?",
    ]
    truth = [
        turn([{"name": "weather_query", "arguments": {"city": city, "date": day}}], str(celsius)),
        turn(
            [{"name": "calculator", "arguments": {"expression": f"{celsius} + {add}"}}],
            str(celsius + add),
        ),
    ]
    return conversation, truth


def chat_then_calc(task_id: str, rng: random.Random) -> tuple[list[str], list[dict]]:
    """A turn without a tool, then one with."""
    expression, value = arithmetic(rng)
    conversation = [rng.choice(GREETINGS), f"Please compute {expression}."]
    return conversation, [
        turn(),
        turn([{"name": "calculator", "arguments": {"expression": expression}}], value),
    ]


def two_tools(task_id: str, rng: random.Random) -> tuple[list[str], list[dict]]:
    """Two tools in one turn."""
    expression, value = arithmetic(rng)
    conversation = [f"What time is it, and what is {expression}?"]
    truth = [
        turn(
            [
                {"name": "get_current_time", "arguments": {}},
                {"name": "calculator", "arguments": {"expression": expression}},
            ],
            value,
        )
    ]
    return conversation, truth


# each kind of task: (task id, rng) -> (the user's messages, the ground truth per turn)
KINDS = {
    "none": no_tool,
    "calc": calc,
    "weather": weather,
    "time": current_time,
    "search": search,
    "weather_then_calc": weather_then_calc,
    "chat_then_calc": chat_then_calc,
    "two_tools": two_tools,
}


def make(kind: str, task_id: str, rng: random.Random) -> dict:
    if kind not in KINDS:
        raise ValueError(kind)
    conversation, truth = KINDS[kind](task_id, rng)
    return {
        "id": task_id,
        "conversation": [{"role": "user", "content": c} for c in conversation],
        "ground_truth": json.dumps({"turns": truth}),
        "data_source": "four_tools",
    }


# the mix: arithmetic most (the skill a small model learns first), every other kind present
MIX = (
    ["calc"] * 6
    + ["none"] * 2
    + ["weather"] * 2
    + ["time", "search", "weather_then_calc", "chat_then_calc", "two_tools"]
)


def rows(prefix: str, count: int, rng: random.Random) -> list[dict]:
    return [make(MIX[i % len(MIX)], f"{prefix}-{i}", rng) for i in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", type=int, default=70)
    parser.add_argument("--test", type=int, default=28)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=str(HERE))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    out = Path(args.out)
    for name, count in (("train", args.train), ("test", args.test)):
        path = out / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows(name, count, rng)))
        print(f"{count} rows -> {path}")


if __name__ == "__main__":
    main()
