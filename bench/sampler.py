"""Sampling throughput of vLLM against the transformers sampler, on the embedded model, and the time
to push the trainer's weights to vLLM.

Both sample the same prompts (chat-formatted questions, token ids) at each batch size, the same
number of new tokens each, temperature 0.7; a batch is sent at once (vLLM: concurrent requests to
its server; transformers: one batched decode, as the local policy does for concurrent episodes).
The figures are tokens sampled per second of wall time, each the best of `--repeats` runs, and
their ratio. The push is the local backend's after each update: the trainer's weights written to
the server's folder and reloaded there (`VLLMPolicy.push`), and for LoRA the adapter alone.

    make setup-vllm
    .venv/bin/python bench/sampler.py [--batches 1 8 32 64] [--new-tokens 64] [--dtype float32]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

import torch

from aworld_train.rollout.policies.client import SamplingParams
from aworld_train.rollout.policies.local import LocalPolicy
from aworld_train.rollout.policies.models import load_model, load_tokenizer, resolve_model_path
from aworld_train.rollout.policies.vllm_policy import VLLMPolicy
from aworld_train.rollout.policies.vllm_server import VLLMServer
from aworld_train.rollout.policies.vllm_weights import write_model_folder
from aworld_train.rollout.tokens.turns.stops import stop_token_ids

MODEL = "embedded:smollm2-135m"


def prompts(tokenizer, n: int) -> list[list[int]]:
    return [
        tokenizer.encode(
            f"<|im_start|>user\nQuestion {i}: tell me a story about the number {i * 7}.<|im_end|>\n"
            "<|im_start|>assistant\n",
            add_special_tokens=False,
        )
        for i in range(n)
    ]


def sampling(new_tokens: int, seed: int) -> SamplingParams:
    return SamplingParams(max_new_tokens=new_tokens, temperature=0.7, seed=seed)


def transformers_rate(policy: LocalPolicy, batch: list[list[int]], new_tokens: int, repeats: int) -> float:
    best = 0.0
    for r in range(repeats):
        started = time.perf_counter()
        gens = policy.generate_batch(batch, sampling(new_tokens, r), seeds=list(range(len(batch))))
        best = max(best, sum(len(g.token_ids) for g in gens) / (time.perf_counter() - started))
    return best


def vllm_rate(policy: VLLMPolicy, batch: list[list[int]], new_tokens: int, repeats: int) -> float:
    async def once(r: int) -> int:
        gens = await asyncio.gather(
            *(policy.generate(p, sampling(new_tokens, r * 1000 + i)) for i, p in enumerate(batch))
        )
        return sum(len(g.token_ids) for g in gens)

    best = 0.0
    for r in range(repeats):
        started = time.perf_counter()
        tokens = asyncio.run(once(r))
        best = max(best, tokens / (time.perf_counter() - started))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--pushes", type=int, default=3)
    args = parser.parse_args()

    dtype = getattr(torch, args.dtype)
    tokenizer = load_tokenizer(MODEL)
    stops = stop_token_ids(tokenizer)
    model = load_model(MODEL, dtype=dtype).eval()
    local = LocalPolicy(model, tokenizer, stops, max_batch_size=max(args.batches))
    folder = Path(
        tempfile.mkdtemp(prefix="bench-vllm-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None)
    )
    log = folder / "vllm.log"
    server = VLLMServer(
        str(write_model_folder(model, folder / "model")),
        str(resolve_model_path(MODEL)),
        log,
        args.dtype,
        4096,
    )
    vllm = VLLMPolicy(server, model, tokenizer, stops, folder / "model")
    try:
        print(
            f"vLLM's server ready in {server.started_s:.1f}s; {args.dtype}, {args.new_tokens} new tokens a prompt"
        )
        print("| prompts at once | transformers tokens/s | vLLM tokens/s | vLLM / transformers |")
        print("|---|---|---|---|")
        for n in args.batches:
            batch = prompts(tokenizer, n)
            ours = transformers_rate(local, batch, args.new_tokens, args.repeats)
            theirs = vllm_rate(vllm, batch, args.new_tokens, args.repeats)
            print(f"| {n} | {ours:.0f} | {theirs:.0f} | {theirs / ours:.2f} |")
        for _ in range(args.pushes):
            with vllm.weights_update:
                pass  # an update that changed nothing still pushes: the push's own time
        pushes = ", ".join(f"{s:.2f}" for s in vllm.pushes)
        print(
            f"weight push (write + reload, {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M weights): {pushes} s"
        )
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
