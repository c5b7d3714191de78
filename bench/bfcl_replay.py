"""Ground-truth replay of BFCL multi-turn entries through our MCP server and our reward.

python bench/bfcl_replay.py [--categories base miss_func ...] [--limit N] [--concurrency 8]

For every entry: its possible-answer calls go turn by turn over MCP to the bfcl
server (one episode each, all at once up to --concurrency), the recorded episode is
scored with aworld_train.rewards.bfcl:checker, and the verdict is compared with
bfcl-eval's own multi_turn_checker on the same calls; each call's result is
compared with what bfcl-eval's executor returns. Prints the pass rate and every
exception with its reason.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from aworld_train.env.bfcl import catalog
from aworld_train.env.launcher import start_server
from aworld_train.rewards.bfcl import checker, official_check
from aworld_train.rewards.bfcl_replay import bfcl_results, replay


async def check_entry(url: str, entry_id: str) -> dict:
    truth = catalog.possible_answer(entry_id)
    traj = await replay(url, entry_id, truth)
    ours = checker(traj, {"id": entry_id, "ground_truth": json.dumps(truth)})
    official = official_check([[[c] for c in turn] for turn in truth], catalog.entry(entry_id), truth)
    results = [c.result for c in traj.tool_calls]
    return {
        "id": entry_id,
        "score": ours["score"],
        "ours": ours.get("error_type", ""),
        "official_valid": official["valid"],
        "official": official.get("error_type", ""),
        "same_results": results == bfcl_results(entry_id, truth),
    }


async def run(categories: list[str], limit: int | None, concurrency: int) -> list[dict]:
    ids = [e["id"] for c in categories for e in catalog.entries(c)][:limit]
    server = start_server("bfcl")
    gate = asyncio.Semaphore(concurrency)

    async def one(entry_id: str) -> dict:
        async with gate:
            return await check_entry(server.url, entry_id)

    try:
        return list(await asyncio.gather(*(one(i) for i in ids)))
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--categories", nargs="+", default=["base"], choices=catalog.CATEGORIES)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows = asyncio.run(run(args.categories, args.limit, args.concurrency))
    n = len(rows)
    passed = sum(r["score"] == 1.0 for r in rows)
    agree = sum((r["score"] == 1.0) == r["official_valid"] for r in rows)
    same = sum(r["same_results"] for r in rows)
    print(f"entries {n} | reward 1.0: {passed} ({passed / n:.1%}) | same verdict as bfcl-eval: {agree}/{n}")
    print(
        f"call results identical to bfcl-eval's executor: {same}/{n} | {time.perf_counter() - started:.1f}s"
    )
    for r in rows:
        if r["score"] != 1.0 or not r["official_valid"] or not r["same_results"]:
            print(
                f"  {r['id']}: ours {r['score']} ({r['ours']}), bfcl-eval {r['official_valid']} "
                f"({r['official']}), same call results {r['same_results']}"
            )


if __name__ == "__main__":
    main()
