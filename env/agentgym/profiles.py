"""How AgentGym's environment servers differ, one entry per environment.

Every AgentGym server has `/create`, `/reset`, `/step` and `/close`, but:
- the environment's id travels as `id` (TextCraft, BabyAI, ALFWorld, SciWorld) or as `env_idx`
  (WebShop, SQLGym, WebArena and the tool environments), and `/create` answers
  `{"id": N, ...}` or a bare `N`;
- the item index goes to `/reset` as `data_idx`, `session_id` (WebShop), `item_id` (SQLGym)
  or `game` (ALFWorld);
- the observation comes back as `observation` or `state`, the reward as `reward` or `score`
  (BabyAI and SciWorld clients read `score`);
- available actions are a response field (ALFWorld), a line of the observation
  (BabyAI: `Available actions: [...]`) or absent (TextCraft: the commands are in the
  instruction).
An environment not listed here gets the defaults, and the id field is then read from what
`/create` answers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Profile:
    name: str
    id_field: str | None = None  # None: `id` if /create answers {"id": ...}, else `env_idx`
    reset_field: str = "data_idx"
    observation_keys: tuple[str, ...] = ("observation", "state")
    reward_keys: tuple[str, ...] = ("reward", "score")
    actions: str | None = None  # "field" | "observation" | None
    prefix_keys: tuple[str, ...] = ()  # reset fields shown before the observation (SciWorld's task)


PROFILES = {
    p.name: p
    for p in (
        Profile("textcraft", id_field="id"),
        Profile("babyai", id_field="id", reward_keys=("score", "reward"), actions="observation"),
        Profile("alfworld", id_field="id", reset_field="game", actions="field"),
        Profile(
            "sciworld", id_field="id", reward_keys=("score", "reward"), prefix_keys=("task_description",)
        ),
        Profile("webshop", id_field="env_idx", reset_field="session_id"),
        Profile("sqlgym", id_field="env_idx", reset_field="item_id"),
        Profile("webarena", id_field="env_idx"),
    )
}


# AgentGym's environments: those above, and those whose servers keep every default.
ENVIRONMENTS = (*PROFILES, "maze", "wordle", "weather", "movie", "academia", "sheet", "todo")


def profile(name: str) -> Profile:
    return PROFILES.get(name.lower(), Profile(name.lower()))


def first(payload: dict[str, Any], keys: tuple[str, ...], default: Any = None) -> Any:
    for key in keys:
        if key in payload:
            return payload[key]
    return default


_ACTIONS_LINE = re.compile(r"\n?\s*Available actions:\s*(\[.*\])\s*$", re.S)


def split_actions(observation: str) -> tuple[str, list[str] | None]:
    """BabyAI's observation ends with `Available actions: ["a", "b"]`: (the text before, the list)."""
    match = _ACTIONS_LINE.search(observation)
    if not match:
        return observation, None
    try:
        actions = json.loads(match.group(1))
    except ValueError:
        return observation, None
    return observation[: match.start()], [str(a) for a in actions]
