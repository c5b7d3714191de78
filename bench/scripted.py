"""The benches' trainer side without a model: a scripted policy (replies by rule, instant or after
a fixed latency) on the embedded model's tokenizer, the rollout runtime around it, and the
calculator agent against its own MCP server. Imported by the benches beside it (`python
bench/NAME.py` puts this folder on the path); aworld_train is imported when called, so that a
bench's --help stays instant."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

MODEL = "embedded:smollm2-135m"  # its tokenizer is the one the scripted replies are written in


def load_tokenizer():
    from aworld_train.rollout.policies.models import load_tokenizer as load

    return load(MODEL)


def calculator_script(tokenizer) -> Callable[[list[int]], str]:
    """Replies of a model that calls the calculator once and then answers with its result."""

    def step(prompt_ids: list[int]) -> str:
        text = tokenizer.decode(prompt_ids)
        tail = text[text.rindex("What is") :]
        results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", tail)
        if results:
            return f"The answer is {results[-1]}."
        expression = re.findall(r"What is ([^?]+)\?", tail)[0]
        call = json.dumps({"name": "calculate", "arguments": {"expression": expression}})
        return f"<tool_call>\n{call}\n</tool_call>"

    return step


def calculator_task(number: int, task_id: str | None = None):
    """ "What is N * 7?", its answer the ground truth."""
    from aworld_train.rollout.episodes.trajectory import Task

    return Task(task_id or str(number), [f"What is {number} * 7?"], ground_truth=number * 7)


def scripted_runtime(tokenizer, reply: Callable[[list[int]], Any], latency_s: float = 0.0, **settings):
    """A runtime whose policy answers by `reply` after `latency_s`; `settings` are the rollout's
    (the tool list stays out of the system turn: the scripts write their calls without it)."""
    from aworld_train.rollout.episodes.runtime import RolloutRuntime
    from aworld_train.rollout.episodes.settings import RolloutSettings
    from aworld_train.rollout.policies.client import ScriptedPolicy
    from aworld_train.rollout.policies.router import PolicyRouter
    from aworld_train.rollout.tokens.templates.renderer import ChatRenderer
    from aworld_train.rollout.tokens.turns.stops import stop_token_ids

    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    policy = ScriptedPolicy(tokenizer, reply, end, latency_s=latency_s)
    return RolloutRuntime(
        PolicyRouter(policy),
        ChatRenderer(tokenizer, tool_block="never"),
        stop_token_ids(tokenizer),
        RolloutSettings(**{"tool_block": "never", **settings}),
    )


@contextlib.contextmanager
def calculator_agent() -> Iterator[tuple[Any, Any]]:
    """(the calculator agent's spec, its running MCP server); the agent's few-shot turns are left
    out, so that a scripted reply is the whole of each turn."""
    from aworld_train.agents.calculator import build_agent
    from aworld_train.aworld.specs import load_agent_spec
    from aworld_train.env.launcher import start_server

    with start_server("calculator") as server:
        os.environ["CALCULATOR_MCP_URL"] = server.url
        yield load_agent_spec(build_agent(url=server.url)).model_copy(update={"few_shot": []}), server
