"""Rollout overhead: our AWorld agent loop against verl's built-in ToolAgentLoop.

Both loops run the same calculator task over the same fake LLMServerClient
(fixed latency, scripted replies); ours runs the real AWorld agent against the
calculator MCP server over HTTP. verl's loop runs twice: with an equivalent
in-process function tool (no tool I/O at all), and with a function tool that calls
the same MCP server the way a verl user glues one in (verl 0.9.1 ships no MCP tool):
one `mcp` client session per call. Printed: episodes per second at each concurrency,
per-turn overhead at concurrency 1 (wall time beyond the fake model's latency, per
LLM call), and the ratios. Needs the verl extra.

    python bench/rollout_overhead.py [--latency 0.05] [--concurrency 1 64 256]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import re
import tempfile
import time
from pathlib import Path

TOOL = '''
from verl.tools.function_tool import function_tool

from aworld_train.env.calculator import evaluate


@function_tool
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: the expression
    """
    return evaluate(expression)
'''


class FakeServer:
    def __init__(self, tokenizer, latency: float) -> None:
        self.tokenizer = tokenizer
        self.latency = latency
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        await asyncio.sleep(self.latency)
        text = self.tokenizer.decode(prompt_ids)
        tail = text[text.rindex("What is") :]
        results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", tail) or re.findall(
            r"<\|im_start\|>tool\n(.*?)<\|im_end\|>", tail
        )
        if results:
            reply = f"The answer is {results[-1]}."
        else:
            expression = re.findall(r"What is ([^?]+)\?", tail)[0]
            call = json.dumps({"name": "calculate", "arguments": {"expression": expression}})
            reply = f"<tool_call>\n{call}\n</tool_call>"
        ids = self.tokenizer.encode(reply, add_special_tokens=False) + [self.end]
        return TokenOutput(token_ids=ids, log_probs=[-0.1] * len(ids), stop_reason="completed")


async def calculate_over_mcp(expression: str) -> str:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async with streamablehttp_client(os.environ["CALCULATOR_MCP_URL"]) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("calculate", {"expression": expression})
    return "".join(getattr(part, "text", "") for part in result.content)


def verl_config(max_response: int = 512):
    from aworld_train.engines.verl.verl_config import verl_defaults

    return verl_defaults(
        [
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.multi_turn.format=hermes",
            f"data.max_response_length={max_response}",
        ]
    )


async def run_verl(tokenizer, server, cfg, tools, n: int, concurrency: int) -> float:
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from aworld_train.agents.calculator import SYSTEM_PROMPT

    limit = asyncio.Semaphore(concurrency)

    async def one(i: int):
        async with limit:
            loop = ToolAgentLoop(
                trainer_config=DictConfigWrap(cfg),
                server_manager=server,
                tokenizer=tokenizer,
                processor=None,
                dataset_cls=RLHFDataset,
                data_config=DictConfigWrap(cfg.data),
                hf_model_type="llama",
                tools=ToolListWrap(tools),
            )
            raw = [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": f"What is {i} * 7?"},
            ]
            return await loop.run(
                {"temperature": 1.0, "logprobs": True},
                raw_prompt=raw,
                extra_info={},
                tools_kwargs={},
                index=i,
            )

    started = time.perf_counter()
    outs = await asyncio.gather(*(one(i) for i in range(n)))
    assert all(o.num_turns >= 3 for o in outs), "verl's loop did not call the tool"
    return time.perf_counter() - started


async def run_ours(tokenizer, server, spec, n: int, concurrency: int) -> float:
    from aworld_train.engines.verl.loop import VerlServerPolicy
    from aworld_train.inputs.config import RolloutSettings
    from aworld_train.rollout.episodes.episode import Episode
    from aworld_train.rollout.episodes.runtime import RolloutRuntime
    from aworld_train.rollout.episodes.trajectory import Task
    from aworld_train.rollout.policies.router import PolicyRouter
    from aworld_train.rollout.tokens.templates.renderer import ChatRenderer
    from aworld_train.rollout.tokens.turns.stops import stop_token_ids

    renderer = ChatRenderer(tokenizer, tool_block="never")
    settings = RolloutSettings(tool_block="never", concurrency=concurrency, episode_timeout_s=600)
    limit = asyncio.Semaphore(concurrency)

    async def one(i: int):
        async with limit:
            policy = VerlServerPolicy(server, {"temperature": 1.0})
            runtime = RolloutRuntime(PolicyRouter(policy), renderer, stop_token_ids(tokenizer), settings)
            return await Episode(
                spec,
                Task(str(i), [f"What is {i} * 7?"], ground_truth=i * 7),
                runtime,
                episode_id=policy.request_id,
            ).run()

    started = time.perf_counter()
    trajs = await asyncio.gather(*(one(i) for i in range(n)))
    bad = [t.status for t in trajs if t.status != "ok" or not t.tool_calls]
    assert not bad, f"our loop: {bad[:5]}"
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", type=float, default=0.05, help="fake model latency per call, seconds")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument("--episodes-at-1", type=int, default=8)
    args = parser.parse_args()

    from verl.tools.tool_registry import load_all_tools

    from aworld_train.agents.calculator import build_agent
    from aworld_train.aworld.specs import load_agent_spec
    from aworld_train.env.launcher import start_server
    from aworld_train.rollout.policies.models import load_tokenizer

    tokenizer = load_tokenizer("embedded:smollm2-135m")
    cfg = verl_config()
    with tempfile.TemporaryDirectory() as tmp, start_server("calculator") as server:
        os.environ["CALCULATOR_MCP_URL"] = server.url
        tool_file = Path(tmp) / "calc_tool.py"
        tool_file.write_text(TOOL)
        tools = load_all_tools(tool_config_path=None, function_tool_path=str(tool_file))
        mcp_tools = [dataclasses.replace(tools[0], fn=calculate_over_mcp, is_async=True)]
        spec = load_agent_spec(build_agent()).model_copy(update={"few_shot": []})
        fake = FakeServer(tokenizer, args.latency)
        # one untimed episode of each loop first: imports, first connections and caches are not per-turn cost
        asyncio.run(run_ours(tokenizer, fake, spec, 2, 1))
        asyncio.run(run_verl(tokenizer, fake, cfg, tools, 2, 1))
        asyncio.run(run_verl(tokenizer, fake, cfg, mcp_tools, 2, 1))
        rows = []
        for concurrency in args.concurrency:
            n = args.episodes_at_1 if concurrency == 1 else concurrency
            ours = asyncio.run(run_ours(tokenizer, fake, spec, n, concurrency))
            theirs = asyncio.run(run_verl(tokenizer, fake, cfg, tools, n, concurrency))
            theirs_mcp = asyncio.run(run_verl(tokenizer, fake, cfg, mcp_tools, n, concurrency))
            rows.append((concurrency, n, ours, theirs, theirs_mcp))
    calls = 2  # tool call, then the answer
    print(
        f"fake model latency {args.latency * 1000:.0f} ms per call; {calls} LLM calls and 1 tool call per episode"
    )
    print("verl = ToolAgentLoop with an in-process tool; verl+MCP = the same loop calling the MCP server")
    print(
        f"{'concurrency':>12}{'episodes':>10}{'ours ep/s':>12}{'verl ep/s':>12}{'verl+MCP':>10}"
        f"{'ours/verl':>11}{'ours/verl+MCP':>15}"
    )
    for concurrency, n, ours, theirs, theirs_mcp in rows:
        print(
            f"{concurrency:>12}{n:>10}{n / ours:>12.2f}{n / theirs:>12.2f}{n / theirs_mcp:>10.2f}"
            f"{theirs / ours:>10.2f}x{theirs_mcp / ours:>14.2f}x"
        )
    for concurrency, n, *times in rows:
        if concurrency == 1:
            ours_turn, theirs_turn, mcp_turn = ((t / n - calls * args.latency) / calls * 1000 for t in times)
            print(
                f"per-turn overhead at concurrency 1: ours {ours_turn:.1f} ms, verl {theirs_turn:.1f} ms, "
                f"verl+MCP {mcp_turn:.1f} ms"
            )


if __name__ == "__main__":
    main()
