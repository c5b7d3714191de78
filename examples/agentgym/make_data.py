"""Train and held-out splits for the AgentGym examples, written for this project.

For each environment: AgentGym-format task lists (`items_train.json`, `items_test.json`:
`{"item_id", "conversations": []}` records), converted to rows by `aworld-train data agentgym`
with each item's task read from our own server, as a user would convert AgentGym's lists.
TextCraft also gets expert trajectories in AgentGym's format (`expert_train.json`, from the
environment's planner) for supervised warm-up.

    python examples/agentgym/make_data.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from aworld_train.env.agentgym import textcraft
from aworld_train.env.agentgym.data import convert
from aworld_train.env.launcher import start_server

HERE = Path(__file__).resolve().parent
PREAMBLE = (
    "You are in a text environment. Every turn you get an observation; answer with your reasoning after "
    "'Thought:' and one action after 'Action:'."
)


def textcraft_items() -> tuple[list[int], list[int]]:
    """Goals that take 2 to 4 actions (a small model can finish them), the few-shot item left out."""
    shown = next(i for i, (goal, _) in enumerate(textcraft.goals()) if goal == "minecraft:oak_button")
    easy = [i for i in range(len(textcraft.goals())) if i != shown and 2 <= len(textcraft.plan(i)) <= 4]
    random.Random(15).shuffle(easy)
    return sorted(easy[:64]), sorted(easy[64:96])


def babyai_items() -> tuple[list[int], list[int]]:
    """The three go-to-the-red-ball levels (items i with i % 40 in 0..2), seeds 0-15 to train, 16-23 held out."""
    levels = range(3)
    return [s * 40 + lv for s in range(16) for lv in levels], [
        s * 40 + lv for s in range(16, 24) for lv in levels
    ]


def expert_record(item: int) -> dict:
    world = textcraft.TextCraftWorld()
    turns = [
        {"from": "human", "loss": None, "value": PREAMBLE},
        {"from": "gpt", "loss": False, "value": "OK. I'll follow your instructions."},
        {"from": "human", "loss": None, "value": world.reset(item)},
    ]
    for action in textcraft.plan(item):
        observation, _, _ = world.step(action)
        turns.append(
            {
                "from": "gpt",
                "loss": True,
                "value": f"Thought:\nNext I {action.split()[0]}.\n\nAction:\n{action}",
            }
        )
        turns.append({"from": "human", "loss": None, "value": observation})
    return {"item_id": f"textcraft_{item}", "conversations": turns}


def write(env: str, items: tuple[list[int], list[int]], server_name: str) -> None:
    folder = HERE / env
    folder.mkdir(exist_ok=True)
    server = start_server(server_name)
    try:
        url = f"http://{server.host}:{server.port}"
        for split, chosen in zip(("train", "test"), items, strict=True):
            listing = folder / f"items_{split}.json"
            listing.write_text(
                json.dumps([{"item_id": f"{env}_{i}", "conversations": []} for i in chosen], indent=0)
            )
            counts = convert(listing, env, folder / f"{split}.jsonl", server=url)
            print(f"{env} {split}: {counts['rows']} rows")
    finally:
        server.stop()


if __name__ == "__main__":
    train, test = textcraft_items()
    write("textcraft", (train, test), "agentgym-textcraft")
    (HERE / "textcraft" / "expert_train.json").write_text(
        json.dumps([expert_record(i) for i in train], indent=1)
    )
    write("babyai", babyai_items(), "agentgym-babyai")
