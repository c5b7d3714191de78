"""backend: verl on CPU: on the same conversation (the calculator agent, a ChatML template that
names its tools, the same replies), our agent loop gives verl's own ToolAgentLoop's tokens: the same
prompt ids, response ids and mask."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("verl.experimental.agent_loop.agent_loop")

from backend_support import calculator_reply, trainer_for  # noqa: E402
from verl_loop_support import FakeLLMServerClient, instantiate_like_verl, row_kwargs  # noqa: E402

from aworld_train.engines.verl.verl_config import verl_defaults  # noqa: E402

# ChatML with tool support that names the tools in the system turn. Names only: the two loops get
# their JSON schemas from different sources (MCP vs verl's tool registry), whose key order differs.
PARITY_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m.role == 'system' %}<|im_start|>system\n{{ m.content }}"
    "{% if tools %}\nTools: {% for t in tools %}{{ t.function.name }} {% endfor %}{% endif %}<|im_end|>\n"
    "{% elif m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant\n{{ m.content }}"
    "{% for c in m.tool_calls %}<tool_call>\n"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n'
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


CALC_TOOL = '''
from verl.tools.function_tool import function_tool

from aworld_train.env.calculator import evaluate


@function_tool
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: the expression
    """
    return evaluate(expression)


@function_tool
def last_result() -> str:
    """The result of this conversation's previous calculation."""
    return ""
'''


def test_token_parity_with_verls_tool_agent_loop(tmp_path, tokenizer, calculator_server, monkeypatch):
    import copy

    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
    from verl.tools.tool_registry import load_all_tools
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from aworld_train.agents.calculator import SYSTEM_PROMPT, build_agent
    from aworld_train.aworld.specs import load_agent_spec

    monkeypatch.setenv("CALCULATOR_MCP_URL", calculator_server.url)
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = PARITY_TEMPLATE
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}

    # ours: the calculator agent without few-shot turns, rendered for verl
    spec = load_agent_spec(build_agent()).model_copy(update={"few_shot": []})
    trainer = trainer_for(tmp_path, {"backend": "verl", "rollout": {"tool_block": "never"}}, agent=spec)
    run = trainer.render()
    ours_server = FakeLLMServerClient(tok, calculator_reply)
    [ours] = asyncio.run(instantiate_like_verl(run, tok, ours_server).run(sampling, **row_kwargs(run)))

    # verl's ToolAgentLoop with an equivalent function tool, the same system prompt and replies
    tool_file = tmp_path / "calc_tool.py"
    tool_file.write_text(CALC_TOOL)
    cfg = verl_defaults(
        [
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.multi_turn.format=hermes",
            f"data.max_response_length={run.final.data.max_response_length}",
        ]
    )
    raw_prompt = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "What is 1 * 3?"}]

    async def run_tool_agent_loop():
        loop = ToolAgentLoop(  # it binds the running event loop at construction
            trainer_config=DictConfigWrap(cfg),
            server_manager=FakeLLMServerClient(tok, calculator_reply),
            tokenizer=tok,
            processor=None,
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(cfg.data),
            hf_model_type="qwen2",
            tools=ToolListWrap(load_all_tools(tool_config_path=None, function_tool_path=str(tool_file))),
        )
        return await loop.run(sampling, raw_prompt=raw_prompt, extra_info={}, tools_kwargs={}, index=0)

    theirs = asyncio.run(run_tool_agent_loop())

    assert ours.reward_score == 1.0
    assert ours.prompt_ids == theirs.prompt_ids
    assert ours.response_ids == theirs.response_ids
    assert ours.response_mask == theirs.response_mask
