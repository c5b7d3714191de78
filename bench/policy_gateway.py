"""The policy gateway's cost: an agent's LLM calls through the OpenAI-compatible gateway against the
same calls made in-process (what our AWorld provider does: `Episode.complete` directly).

Both paths run the same loop, the same number of calls per episode, on the same scripted policy
(instant, so the figures are the serving cost alone): call with a tool, get a tool call, send a
tool result, ..., answer. In-process, the loop calls the episode. Through the gateway, the loop
runs in an agent process (this file with `--agent`), one session per episode, on the `openai` SDK
or on bare httpx (JSON in and out: what the gateway serves when the client costs little).
Printed per concurrency: calls/s, and the trainer process's CPU per call (all its threads: the
episode, the ledger and, with the gateway, its HTTP server), for both, and their difference: the
gateway's overhead per call. The agent process's own CPU per call is printed beside.

    python bench/policy_gateway.py [--episodes 64] [--calls 8] [--concurrency 1 64] [--client httpx sdk]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time

from agent_process import serve_turns
from scripted import load_tokenizer, scripted_runtime

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "Evaluate an arithmetic expression",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]


def first_messages(text: str) -> list[dict]:
    return [{"role": "system", "content": "You compute."}, {"role": "user", "content": text}]


def tool_results(message: dict, k: int) -> list[dict]:
    return [
        {"role": "tool", "tool_call_id": c["id"], "content": str(k)} for c in message.get("tool_calls", [])
    ]


# -- the agent process (--agent): the loop on the openai SDK, or on bare httpx ----------------
async def sdk_turn(turn: dict, calls: int) -> str:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=turn["base_url"], api_key=turn["api_key"], max_retries=0)
    messages = first_messages(turn["text"])
    for k in range(calls):
        response = await client.chat.completions.create(model=turn["model"], messages=messages, tools=TOOLS)
        message = response.choices[0].message.model_dump(exclude_none=True)
        messages.append(message)
        if not message.get("tool_calls"):
            break
        messages += tool_results(message, k)
    await client.close()
    return messages[-1].get("content") or ""


_HTTP = None


async def httpx_turn(turn: dict, calls: int) -> str:
    """The same loop as plain JSON over one shared httpx client: the least a client can spend."""
    global _HTTP
    import httpx

    _HTTP = _HTTP or httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=256))
    headers = {"Authorization": f"Bearer {turn['api_key']}"}
    messages = first_messages(turn["text"])
    for k in range(calls):
        body = {"model": turn["model"], "messages": messages, "tools": TOOLS}
        response = await _HTTP.post(f"{turn['base_url']}/chat/completions", json=body, headers=headers)
        message = response.raise_for_status().json()["choices"][0]["message"]
        messages.append({key: value for key, value in message.items() if value is not None})
        if not message.get("tool_calls"):
            break
        messages += tool_results(message, k)
    return messages[-1].get("content") or ""


async def agent_main(calls: int, client: str) -> None:
    run_turn = sdk_turn if client == "sdk" else httpx_turn
    await serve_turns(lambda turn: run_turn(turn, calls))


# -- the trainer side -------------------------------------------------------------------------
class InProcessAgent:
    """The same loop, calling the episode directly (our in-process provider's path)."""

    mcp_config: dict = {}

    def __init__(self, calls: int) -> None:
        self.calls = calls

    def roles(self):
        from aworld_train.rollout.episodes.driver import AgentRole

        return [AgentRole("bench_agent")]

    def start(self, endpoint, episode_id, task, max_assistant_turns):
        return _InProcessRun(endpoint, self.calls)


class _InProcessRun:
    def __init__(self, endpoint, calls: int) -> None:
        self.endpoint, self.calls = endpoint, calls

    async def turn(self, user_turn: int, text: str) -> str | None:
        messages = first_messages(text)
        for k in range(self.calls):
            reply = await self.endpoint.complete(messages, TOOLS)
            message = {"role": "assistant", "content": reply.content}
            if reply.tool_calls:
                message["tool_calls"] = reply.tool_calls
            messages.append(message)
            if not reply.tool_calls:
                break
            messages += tool_results(message, k)
        return None

    async def release(self) -> None:
        return None


def script(tokenizer, calls: int):
    """A tool call until the prompt holds `calls - 1` tool results, then the answer."""

    def reply(ids: list[int]) -> str:
        results = tokenizer.decode(ids).count("<tool_response>")
        if results >= calls - 1:
            return "The answer is 42."
        return '<tool_call>\n{"name": "calculate", "arguments": {"expression": "6 * 7"}}\n</tool_call>'

    return reply


def cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


async def measure(agent, episodes: int, concurrency: int, calls: int, tokenizer) -> dict:
    from aworld_train.rollout.episodes.batch import run_episodes
    from aworld_train.rollout.episodes.trajectory import Task

    runtime = scripted_runtime(
        tokenizer,
        script(tokenizer, calls),
        concurrency=concurrency,
        max_assistant_turns=calls + 1,
        max_new_tokens=64,
    )
    tasks = [Task(f"t{i}", [f"Task {i}: what is 6 * 7?"]) for i in range(episodes)]
    cpu, wall = cpu_s(resource.RUSAGE_SELF), time.perf_counter()
    trajs = await run_episodes(agent, tasks, runtime)
    wall, cpu = time.perf_counter() - wall, cpu_s(resource.RUSAGE_SELF) - cpu
    statuses = {t.status for t in trajs}
    if statuses != {"ok"}:
        raise SystemExit(f"episodes ended {statuses}: {[t.error for t in trajs if t.error][:2]}")
    made = sum(t.num_turns for t in trajs)
    return {"calls": made, "calls_per_s": made / wall, "cpu_ms_per_call": 1000 * cpu / made}


async def bench(args) -> None:
    from aworld_train.rollout.gateway.process_agent import ProcessAgent, agent_process
    from aworld_train.rollout.gateway.server import gateway

    tokenizer = load_tokenizer()
    local = InProcessAgent(args.calls)
    await measure(local, 4, 4, args.calls, tokenizer)  # warm-up: imports, the template's first renders
    rows = []
    for client in args.client:
        command = [sys.executable, __file__, "--agent", "--calls", str(args.calls), "--client", client]
        remote = ProcessAgent(name=f"bench_{client}", command=command)
        process = agent_process(remote, gateway())
        for concurrency in args.concurrency:
            inside = await measure(local, args.episodes, concurrency, args.calls, tokenizer)
            await measure(remote, 4, 4, args.calls, tokenizer)  # warm-up: a fresh agent process's start
            before = cpu_s(resource.RUSAGE_CHILDREN)
            outside = await measure(remote, args.episodes, concurrency, args.calls, tokenizer)
            await asyncio.wrap_future(gateway().submit(process.stop()))  # its CPU is counted once it exits
            agent_ms = 1000 * (cpu_s(resource.RUSAGE_CHILDREN) - before) / outside["calls"]
            rows.append((client, concurrency, inside, outside, agent_ms))
    print(f"{args.episodes} episodes of {args.calls} calls each; scripted policy (instant)")
    print(
        f"{'client':>6} | {'concurrency':>11} | {'in-process calls/s':>18} | {'gateway calls/s':>15} | "
        f"{'in-process CPU ms/call':>22} | {'gateway CPU ms/call':>19} | {'overhead ms/call':>16} | "
        f"{'agent process CPU ms/call':>25}"
    )
    for client, concurrency, inside, outside, agent_ms in rows:
        print(
            f"{client:>6} | {concurrency:>11} | {inside['calls_per_s']:>18.1f} | {outside['calls_per_s']:>15.1f} | "
            f"{inside['cpu_ms_per_call']:>22.2f} | {outside['cpu_ms_per_call']:>19.2f} | "
            f"{outside['cpu_ms_per_call'] - inside['cpu_ms_per_call']:>16.2f} | {agent_ms:>25.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--calls", type=int, default=8, help="LLM calls per episode")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    parser.add_argument(
        "--client",
        nargs="+",
        default=["httpx", "sdk"],
        choices=["httpx", "sdk"],
        help="the agent's HTTP client",
    )
    parser.add_argument("--agent", action="store_true", help=argparse.SUPPRESS)  # run as the agent process
    args = parser.parse_args()
    if args.agent:
        asyncio.run(agent_main(args.calls, args.client[0]))
    else:
        asyncio.run(bench(args))


if __name__ == "__main__":
    main()
