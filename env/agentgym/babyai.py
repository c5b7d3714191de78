"""BabyAI (minigrid's grid-world levels, described in text) as an AgentGym-protocol server.

Item `i` is level `LEVELS[i % 40]` with seed `i // 40`, the mapping AgentGym's BabyAI server
uses, so an item index names the same level and layout there and here. The text and the
action set are written here: the objects in the agent's 7x7 view with where they are
relative to it, what it carries, and the actions it may take now, at the end of every
observation as `Available actions: [...]` (the line the bridge's `available_actions` reads):
`turn left`, `turn right`, `move forward`, `go to OBJECT N` and `pick up OBJECT N` (walks
there first) for the objects in view, `toggle` (opens the door or box in front), `drop`.
Reaching the level's goal gives reward 1 and ends the episode; running out of steps ends it
with 0.

Run: `aworld-train env up agentgym-babyai [--port 36002]`.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any

LEVELS = tuple(
    f"BabyAI-{name}-v0" if name != "GoToObjS6" else "BabyAI-GoToObjS6-v1"  # minigrid 3 renamed it
    for name in (
        "GoToRedBallGrey GoToRedBall GoToRedBallNoDists GoToObjS6 GoToLocalS8N7 GoToObjMazeS7 GoToImpUnlock "
        "GoToSeqS5R2 GoToRedBlueBall GoToDoor GoToObjDoor Open OpenRedDoor OpenDoorLoc OpenRedBlueDoorsDebug "
        "OpenDoorsOrderN4Debug Pickup UnblockPickup PickupLoc PickupDistDebug PickupAbove PutNextLocalS6N4 "
        "PutNextS7N4Carrying Unlock UnlockLocalDist KeyInBox UnlockPickupDist BlockedUnlockPickup UnlockToUnlock "
        "ActionObjDoor FindObjS7 KeyCorridorS6R3 OneRoomS20 MoveTwoAcrossS8N9 SynthS5R2 SynthLoc SynthSeq "
        "MiniBossLevel BossLevel BossLevelNoUnlock"
    ).split()
)
LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE = 0, 1, 2, 3, 4, 5
_TARGETED = re.compile(r"(go to|pick up) (.+) ([0-9]+)")
_DOOR_STATES = ("open", "closed", "locked")


def level_of(data_idx: int) -> tuple[str, int]:
    return LEVELS[data_idx % len(LEVELS)], data_idx // len(LEVELS)


def _name(obj: Any) -> str:
    if obj.type == "door":
        state = "open" if obj.is_open else "locked" if obj.is_locked else "closed"
        return f"{obj.color} {state} door"
    if obj.type == "goal":
        return "goal"
    return f"{obj.color} {obj.type}"


def _steps(n: int) -> str:
    return f"{n} step{'s' if n != 1 else ''}"


class BabyAIWorld:
    def __init__(self) -> None:
        self.env = None
        self.mission = ""
        self.done = False
        self.visible: dict[str, tuple[int, int]] = {}

    @property
    def u(self):
        return self.env.unwrapped

    def reset(self, data_idx: int) -> str:
        import gymnasium
        import minigrid  # noqa: F401 - registers the BabyAI levels

        level, seed = level_of(data_idx)
        self.env = gymnasium.make(level)
        self.env.reset(seed=seed)
        self.mission, self.done = self.u.mission, False
        return f"Your goal: {self.mission}\n{self._describe()}"

    # ---- what the agent sees -------------------------------------------------------------
    def _relative(self, x: int, y: int) -> tuple[int, int]:
        ax, ay = (int(v) for v in self.u.agent_pos)
        dx, dy = x - ax, y - ay
        fx, fy = (int(v) for v in self.u.dir_vec)
        rx, ry = (int(v) for v in self.u.right_vec)
        return dx * fx + dy * fy, dx * rx + dy * ry

    def _in_sight(self) -> list[tuple[str, tuple[int, int]]]:
        """(name, position) of each object in view, nearest first, numbered per name."""
        grid, seen = self.u.gen_obs_grid()
        found = []
        for x in range(self.u.width):
            for y in range(self.u.height):
                obj = self.u.grid.get(x, y)
                if obj is None or obj.type == "wall" or not self.u.in_view(x, y):
                    continue
                vx, vy = self.u.get_view_coords(x, y)
                if not seen[vx, vy]:
                    continue
                front, right = self._relative(x, y)
                found.append((abs(front) + abs(right), _name(obj), (x, y)))
        found.sort()
        counts: dict[str, int] = {}
        named = []
        for _, name, pos in found:
            counts[name] = counts.get(name, 0) + 1
            named.append((f"{name} {counts[name]}", pos))
        return named

    def _describe(self) -> str:
        lines = []
        self.visible = dict(self._in_sight())
        if self.visible:
            for name, (x, y) in self.visible.items():
                front, right = self._relative(x, y)
                side = (
                    ""
                    if right == 0
                    else f" and {_steps(abs(right))} to your {'right' if right > 0 else 'left'}"
                )
                where = (
                    f"{_steps(front)} in front of you{side}"
                    if front
                    else f"{_steps(abs(right))} to your {'right' if right > 0 else 'left'}"
                )
                lines.append(f"{name}: {where}.")
        else:
            lines.append("You see no objects.")
        ahead = self.u.grid.get(*self.u.front_pos)
        if ahead is not None and ahead.type == "wall":
            lines.append("There is a wall right in front of you.")
        if self.u.carrying is not None:
            lines.append(f"You are carrying a {_name(self.u.carrying)}.")
        return "\n".join(lines) + "\nAvailable actions: " + _json_list(self.available_actions())

    def available_actions(self) -> list[str] | None:
        actions = ["turn left", "turn right", "move forward"]
        for name, pos in self.visible.items():
            actions.append(f"go to {name}")
            obj = self.u.grid.get(*pos)
            if obj is not None and obj.can_pickup() and self.u.carrying is None:
                actions.append(f"pick up {name}")
        actions.append("toggle")
        if self.u.carrying is not None:
            actions.append("drop")
        return actions

    # ---- acting --------------------------------------------------------------------------
    def _path_to(self, target: tuple[int, int]) -> list[int] | None:
        """Turns and moves that leave the agent facing `target` (standing on it, for a goal square)."""
        onto = self.u.grid.get(*target) is not None and self.u.grid.get(*target).type == "goal"
        start = (tuple(int(v) for v in self.u.agent_pos), int(self.u.agent_dir))
        vecs = ((1, 0), (0, 1), (-1, 0), (0, -1))
        queue, came = deque([start]), {start: None}
        while queue:
            state = queue.popleft()
            (x, y), d = state
            fx, fy = x + vecs[d][0], y + vecs[d][1]
            if (not onto and (fx, fy) == target) or (onto and (x, y) == target):
                path = []
                while came[state] is not None:
                    state, action = came[state]
                    path.append(action)
                return path[::-1]
            moves = [(LEFT, ((x, y), (d - 1) % 4)), (RIGHT, ((x, y), (d + 1) % 4))]
            cell = self.u.grid.get(fx, fy) if 0 <= fx < self.u.width and 0 <= fy < self.u.height else False
            if cell is None or (cell and cell.can_overlap()):
                moves.append((FORWARD, ((fx, fy), d)))
            for action, nxt in moves:
                if nxt not in came:
                    came[nxt] = (state, action)
                    queue.append(nxt)
        return None

    def step(self, action: str) -> tuple[str, float, bool]:
        action = " ".join(action.strip().lower().split())
        primitive = {
            "turn left": [LEFT],
            "turn right": [RIGHT],
            "move forward": [FORWARD],
            "toggle": [TOGGLE],
            "drop": [DROP],
        }
        if action in primitive:
            plan = primitive[action]
        elif (match := _TARGETED.fullmatch(action)) and f"{match.group(2)} {match.group(3)}" in self.visible:
            path = self._path_to(self.visible[f"{match.group(2)} {match.group(3)}"])
            if path is None:
                return (
                    f"There is no path to the {match.group(2)} {match.group(3)}.\n{self._describe()}",
                    0.0,
                    False,
                )
            plan = path + ([PICKUP] if match.group(1) == "pick up" else [])
        else:
            return f"Could not execute {action}.\n{self._describe()}", 0.0, False
        reward, done = 0.0, False
        for primitive_action in plan:
            _, r, terminated, truncated, _ = self.env.step(primitive_action)
            if terminated or truncated:
                reward, done = (1.0 if terminated and r > 0 else 0.0), True
                break
        self.done = done
        if done:
            ending = "The task is completed." if reward else "The task has ended without success."
            return f"{ending}\n{self._describe()}", reward, True
        return self._describe(), reward, False


def _json_list(items: list[str] | None) -> str:
    import json

    return json.dumps(items or [])


def build_app(capacity: int = 4096):
    from aworld_train.env.agentgym.http import build_app as build

    return build("BabyAI", BabyAIWorld, capacity)


def serve(transport: str = "http", host: str = "127.0.0.1", port: int = 36002) -> None:
    from aworld_train.env.agentgym.http import serve_app

    if transport != "http":
        raise SystemExit("AgentGym environment servers speak HTTP only; drop --transport stdio")
    serve_app(build_app(), host, port)
