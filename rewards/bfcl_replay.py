"""Replay a BFCL entry's possible-answer calls through the MCP server, as an episode would.

Used by the tests and `bench/bfcl_replay.py` to show that the server and the reward
agree with bfcl-eval: the calls go over MCP with the episode headers, turn by
turn, and come back as a Trajectory the reward scores like any other.
"""

from __future__ import annotations

import ast
import uuid
from typing import Any

from aworld_train.core.protocol import EPISODE_HEADER, TASK_HEADER, TURN_HEADER
from aworld_train.env.bfcl import catalog
from aworld_train.rollout.episodes.trajectory import ToolCallRecord, Trajectory


def parse_call(text: str, entry: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """`mv(source='a', destination='b')` -> ("mv", {...}); positional values get the doc's parameter names."""
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain function call: {text!r}")
    name = node.func.id
    arguments = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    if node.args:
        doc = next(d for d in catalog.revealed_docs(entry, len(entry["question"])) if d["name"] == name)
        for param, value in zip(doc["parameters"]["properties"], node.args, strict=False):
            arguments[param] = ast.literal_eval(value)
    return name, arguments


async def replay(
    url: str, entry_id: str, turns: list[list[str]], episode_id: str | None = None
) -> Trajectory:
    """Send `turns` (call texts per user turn) to the server, one call per model step."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    entry = catalog.entry(entry_id)
    episode_id = episode_id or uuid.uuid4().hex
    traj = Trajectory(episode_id=episode_id, task_id=entry_id)
    step = 0
    for turn, calls in enumerate(turns):
        traj.user_turns = turn + 1
        headers = {EPISODE_HEADER: episode_id, TASK_HEADER: entry_id, TURN_HEADER: str(turn)}
        async with streamablehttp_client(url, headers=headers) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                for text in calls:
                    name, arguments = parse_call(text, entry)
                    result = await session.call_tool(name, arguments)
                    output = "".join(getattr(c, "text", "") for c in result.content)
                    traj.tool_calls.append(
                        ToolCallRecord(
                            f"call_{step}", name, arguments, output, bool(result.isError), step, turn
                        )
                    )
                    step += 1
    traj.num_turns = step
    return traj


def bfcl_results(entry_id: str, turns: list[list[str]]) -> list[str]:
    """What bfcl-eval's own executor returns for the same calls, executed in a fresh world."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    entry = catalog.entry(entry_id)
    name = f"aworld_train_replay_{uuid.uuid4().hex}"
    results: list[str] = []
    try:
        for calls in turns:
            out, _ = multi_turn_utils.execute_multi_turn_func_call(
                calls,
                entry.get("initial_config") or {},
                entry["involved_classes"],
                name,
                entry_id,
                long_context="long_context" in entry_id,
            )
            results.extend(out)
    finally:
        store = vars(multi_turn_utils)
        for key in [k for k in store if k.startswith(name)]:
            del store[key]
    return results
