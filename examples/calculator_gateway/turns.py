"""The agent's side of the trainer's JSON-lines protocol, shared by this folder's agents (plain
Python: no aworld-train). `serve(run_turn)` answers the trainer's hello line with a ready line
once the agent is loaded (the trainer sends no turn before it), reads a turn per stdin line, runs
`run_turn(turn, state)` for each concurrently (`state`: a dict kept per episode until its "end"
line), and writes each turn's answer, or its error, as one stdout line. An "end" line cancels the
episode's turns still running: the trainer answers no more of its calls, and a client left to retry
them (AWorld's retries, then its `failed_requests/` dumps in the working folder) would only waste
time and litter."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

RunTurn = Callable[[dict[str, Any], dict[str, Any]], Awaitable[str]]
PROTOCOL = 1


def write(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")  # one whole line per write: answers never interleave
    sys.stdout.flush()


async def serve(run_turn: RunTurn) -> None:
    loop = asyncio.get_running_loop()
    episodes: dict[str, dict[str, Any]] = {}
    running: dict[str, set[asyncio.Task]] = {}  # each episode's turns in progress

    async def answer(turn: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"episode_id": turn["episode_id"], "user_turn": turn["user_turn"]}
        try:
            reply["answer"] = await run_turn(turn, episodes.setdefault(turn["episode_id"], {}))
        except Exception as exc:  # reported to the trainer, which ends the episode as an error
            reply["error"] = f"{type(exc).__name__}: {exc}"
        write(reply)

    while line := await loop.run_in_executor(None, sys.stdin.readline):  # "" once the trainer is gone
        message = json.loads(line)
        if message["type"] == "hello":
            write({"type": "ready", "protocol": PROTOCOL})
            continue
        episode = message.get("episode_id")
        if message["type"] == "turn":
            task = asyncio.ensure_future(answer(message))
            running.setdefault(episode, set()).add(task)
            task.add_done_callback(running[episode].discard)
        elif message["type"] == "end":
            episodes.pop(episode, None)
            for task in running.pop(episode, set()):
                task.cancel()
    await asyncio.gather(*(task for tasks in running.values() for task in tasks), return_exceptions=True)
