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
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from rollout_profile import calculator_script  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.05, help="scripted model latency per call, s")
    args = parser.parse_args()

    from aworld_train.agents.calculator import build_agent
    from aworld_train.aworld.specs import load_agent_spec
    from aworld_train.env.launcher import start_server
    from aworld_train.inputs.config import RolloutSettings
    from aworld_train.rollout.episodes.batch import run_episodes
    from aworld_train.rollout.episodes.runtime import RolloutRuntime
    from aworld_train.rollout.episodes.trajectory import Task
    from aworld_train.rollout.policies.client import ScriptedPolicy
    from aworld_train.rollout.policies.models import load_tokenizer
    from aworld_train.rollout.tokens.templates.renderer import ChatRenderer
    from aworld_train.rollout.tokens.turns.stops import stop_token_ids

    tokenizer = load_tokenizer("embedded:smollm2-135m")
    stops = stop_token_ids(tokenizer)
    rows = []
    with start_server("calculator") as server:
        os.environ["CALCULATOR_MCP_URL"] = server.url
        spec = load_agent_spec(build_agent()).model_copy(update={"few_shot": []})
        for workers in args.workers:
            settings = RolloutSettings(
                tool_block="never", concurrency=args.concurrency, workers=workers, episode_timeout_s=600
            )
            policy = ScriptedPolicy(tokenizer, calculator_script(tokenizer), stops[0], args.latency)
            runtime = RolloutRuntime(policy, ChatRenderer(tokenizer, tool_block="never"), stops, settings)
            tasks = [Task(str(i), [f"What is {i} * 7?"], ground_truth=i * 7) for i in range(args.episodes)]
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
