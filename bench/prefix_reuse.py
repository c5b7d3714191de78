"""Multi-turn sampling of the local policy with and without prefix reuse, on BFCL-like prompts.

python bench/prefix_reuse.py [--model embedded:smollm2-135m] [--tasks 2] [--group 2] [--turns 4]

Each task is a BFCL multi-turn entry: a system prompt with its tool list (about 4k tokens
with SmolLM2's tokenizer) and its first user message; a GRPO group samples it `--group`
times. Every turn samples a response greedily, then appends a tool result and the next
assistant header, so that the next prompt extends the last prompt and response exactly,
as the ledger guarantees. The same episodes run twice, with the prefix cache and without
it (`rollout.prefix_cache_mb: 0`); the script prints the time and prefilled tokens of
each, checks that both sampled the same tokens, and prints the ratio.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from aworld_train.env.bfcl import catalog
from aworld_train.rollout.policies.client import SamplingParams
from aworld_train.rollout.policies.local import LocalPolicy
from aworld_train.rollout.policies.models import load_model, load_tokenizer
from aworld_train.rollout.tokens.turns.stops import stop_token_ids


def first_prompts(tokenizer, tasks: int, low: int = 3000, high: int = 5000) -> list[list[int]]:
    """The first `tasks` BFCL base entries whose first prompt has low..high tokens."""
    out = []
    for entry in catalog.entries("base"):
        if len(out) == tasks:
            break
        tools = "\n".join(json.dumps(doc) for doc in catalog.revealed_docs(entry, 0))
        text = (
            "<|im_start|>system\nYou are an agent that calls functions. Call them as "
            '<tool_call>{"name": ..., "arguments": {...}}</tool_call>.\n'
            f"<tools>\n{tools}\n</tools><|im_end|>\n"
            f"<|im_start|>user\n{catalog.user_turns(entry)[0]}<|im_end|>\n<|im_start|>assistant\n"
        )
        ids = tokenizer.encode(text)
        if low <= len(ids) <= high:
            out.append(ids)
    return out


def run(policy: LocalPolicy, tokenizer, prompts: list[list[int]], turns: int, max_new: int):
    sampling = SamplingParams(max_new_tokens=max_new, temperature=0.0)
    sampled, prompt_tokens, per_turn = [], 0, []
    started = time.perf_counter()
    for turn in range(turns):
        t0 = time.perf_counter()
        gens = policy.generate_batch(prompts, sampling)
        per_turn.append(time.perf_counter() - t0)
        prompt_tokens += sum(len(p) for p in prompts)
        sampled.append([g.token_ids for g in gens])
        result = tokenizer.encode(
            f'<|im_end|>\n<|im_start|>tool\n{{"result": "ok", "turn": {turn}}}<|im_end|>\n'
            "<|im_start|>assistant\n"
        )
        prompts = [p + g.token_ids + result for p, g in zip(prompts, gens, strict=True)]
    return time.perf_counter() - started, per_turn, prompt_tokens, sampled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded:smollm2-135m")
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--group", type=int, default=2, help="samples per task (GRPO group)")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    tokenizer = load_tokenizer(args.model)
    model = load_model(args.model).eval()
    stops = stop_token_ids(tokenizer)
    prompts = [p for p in first_prompts(tokenizer, args.tasks) for _ in range(args.group)]
    print(
        f"{args.model}: {len(prompts)} episodes ({args.tasks} tasks x {args.group}), {args.turns} turns, "
        f"first prompts {min(map(len, prompts))}-{max(map(len, prompts))} tokens, "
        f"{args.max_new_tokens} new tokens per turn, {torch.get_num_threads()} threads"
    )
    results = {}
    for name, budget in (("reuse", 1024.0), ("no reuse", 0.0)):
        policy = LocalPolicy(model, tokenizer, stops, prefix_cache_mb=budget)
        wall, per_turn, prompt_tokens, sampled = run(
            policy, tokenizer, list(prompts), args.turns, args.max_new_tokens
        )
        cache = policy.prefix_cache
        prefilled = cache.misses if cache else prompt_tokens
        results[name] = (wall, sampled)
        turns = " ".join(f"{t:.1f}" for t in per_turn)
        print(
            f"{name:>9}: {wall:7.1f} s  (per turn {turns} s)  prefilled {prefilled} of {prompt_tokens} prompt tokens"
        )
    same = results["reuse"][1] == results["no reuse"][1]
    print(f"same sampled tokens: {same}")
    print(f"speed-up with reuse: {results['no reuse'][0] / results['reuse'][0]:.2f}x")


if __name__ == "__main__":
    main()
