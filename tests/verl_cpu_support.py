"""Reward for the CPU run of verl's trainer. A random tiny model never answers right, so
exact_answer would give every sample 0 and GRPO no gradient; this dense stand-in scores the
share of distinct characters in the answer, which differs between samples of a group."""


def distinct_chars(data_source, solution_str, ground_truth, extra_info=None):
    text = solution_str or ""
    return {"score": len(set(text)) / max(1, len(text)), "chars": len(text)}


# --- a tiny model that calls a tool, for the failed-episode check -------------------------------
# A random model never writes a tool call, so a hanging tool would never be reached. The run's
# model is the random tiny Llama taught, in a few seconds of supervised steps, to answer every
# chat turn with one call of `lookup` (tests/slow_mcp_server.py). `lookup` returns a random
# number, or hangs for a task whose id starts with "hang".
LOOKUP_CALL = '<tool_call>\n{"name": "lookup", "arguments": {}}\n</tool_call>'
SYSTEM = "Look up the number with the lookup tool, then answer with it."


def build_agent(url: str | None = None):
    from aworld_train.agents.mcp_config import env_url, streamable_http
    from aworld_train.aworld.runtime import Agent, AgentConfig

    return Agent(
        name="lookup_agent",
        desc="Looks a number up",
        system_prompt=SYSTEM,
        mcp_config=streamable_http("slow", url or env_url("SLOW_MCP_URL", "http://127.0.0.1:8799/mcp"), 30.0),
        mcp_servers=["slow"],
        conf=AgentConfig(llm_provider="aworld_train"),
    )


def lookup_reward(trajectory, sample):
    """The numbers the tool returned: they differ between the samples of a group."""
    values = [float(c.result) for c in trajectory.tool_calls if c.result and not c.error]
    return {"score": sum(values) / len(values) if values else 0.0, "lookups": len(values)}


def tool_calling_model(out: str, steps: int = 60) -> str:
    import importlib.util
    from pathlib import Path

    import torch
    from transformers import AutoModelForCausalLM

    from aworld_train.models import load_tokenizer

    script = Path(__file__).parents[1] / "scripts" / "gpu" / "make_tiny_model.py"
    spec = importlib.util.spec_from_file_location("make_tiny_model", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(out)
    tokenizer = load_tokenizer(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    target = tokenizer.encode(LOOKUP_CALL + "<|im_end|>", add_special_tokens=False)
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    prefixes = []
    for question in ("What is the number?", "Find the value for task 3.", "Look it up.", "Which number?"):
        first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
        later = [*first, {"role": "assistant", "content": "", "tool_calls": [call]}]
        later.append({"role": "tool", "content": "0.5", "tool_call_id": "c1"})
        for messages in (first, later):
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            prefixes.append(tokenizer.encode(text, add_special_tokens=False))
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        for prefix in prefixes:
            ids = torch.tensor([prefix + target])
            labels = torch.tensor([[-100] * len(prefix) + target])
            loss = model(input_ids=ids, labels=labels).loss
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.to(torch.bfloat16).save_pretrained(out)
    return out
