"""An agent in a process of its own, as the trainer's `ProcessAgent` starts one: the benches that
measure the gateway run themselves with `--agent` as that process. It speaks the trainer's JSON
lines on stdin and stdout (rollout/gateway/process_agent.py): "hello" is answered "ready", each
"turn" runs concurrently with the others, its answer (or error) one line back."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable


def _say(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def serve_turns(run_turn: Callable[[dict], Awaitable[str]]) -> None:
    """Answer the trainer's turns with `run_turn(turn)` (the turn's base_url, api_key, model, text)
    until stdin closes; an exception becomes the turn's error, which ends the episode as one."""
    loop, running = asyncio.get_running_loop(), set()

    async def answer(turn: dict) -> None:
        reply = {"episode_id": turn["episode_id"], "user_turn": turn["user_turn"]}
        try:
            reply["answer"] = await run_turn(turn)
        except Exception as exc:
            reply["error"] = f"{type(exc).__name__}: {exc}"
        _say(reply)

    while line := await loop.run_in_executor(None, sys.stdin.readline):
        message = json.loads(line)
        if message["type"] == "hello":
            _say({"type": "ready", "protocol": 1})
        elif message["type"] == "turn":
            task = asyncio.ensure_future(answer(message))
            running.add(task)
            task.add_done_callback(running.discard)
    await asyncio.gather(*running)
