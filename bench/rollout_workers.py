"""Episodes per second with `rollout.workers` 1, 2, ...: one policy in this process, episodes in workers.

The calculator agent against the calculator MCP server, with a scripted policy of fixed
latency in the main process (2 LLM calls, 1 tool call per episode). Each setting first runs a
warm-up batch (worker start-up is not timed), then `--episodes` episodes at `--concurrency`.

    python bench/rollout_workers.py [--workers 1 2] [--episodes 256] [--concurrency 64] [--latency 0.05]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from scripted import calculator_agent, calculator_script, calculator_task, load_tokenizer, scripted_runtime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.05, help="scripted model latency per call, s")
    args = parser.parse_args()

    from aworld_train.rollout.episodes.batch import run_episodes

    tokenizer = load_tokenizer()
    rows = []
    with calculator_agent() as (spec, _):
        for workers in args.workers:
            runtime = scripted_runtime(
                tokenizer,
                calculator_script(tokenizer),
                args.latency,
                concurrency=args.concurrency,
                workers=workers,
                episode_timeout_s=600,
            )
            tasks = [calculator_task(i) for i in range(args.episodes)]
            try:
                asyncio.run(run_episodes(spec, tasks[: 2 * workers], runtime))  # start-up, untimed
                started = time.perf_counter()
                trajs = asyncio.run(run_episodes(spec, tasks, runtime))
                wall = time.perf_counter() - started
            finally:
                runtime.close()
            bad = [t.status for t in trajs if t.status != "ok"]
            assert not bad, f"workers={workers}: {bad[:5]} {trajs[0].error}"
            rows.append((workers, len(trajs), wall))
    print(
        f"calculator agent, scripted policy {args.latency * 1000:.0f} ms per call in the main process, "
        f"concurrency {args.concurrency}, {os.cpu_count()} CPUs"
    )
    print(f"{'workers':>8}{'episodes':>10}{'wall s':>9}{'episodes/s':>12}")
    for workers, n, wall in rows:
        print(f"{workers:>8}{n:>10}{wall:>9.1f}{n / wall:>12.2f}")


if __name__ == "__main__":
    main()
