"""Step time and peak memory of the local GRPO backend against TRL's GRPOTrainer.

Same random model (Llama, SmolLM2's tokenizer), same batch (prompts x group),
same prompt and completion lengths, a single-turn task both can run. Each side
runs in its own process so its peak RSS is its own; the ratio is printed.

    make bench-env      # TRL in a venv of its own (.venv-bench): beside verl it breaks verl's actor
    .venv/bin/python bench/local_step.py [--steps 4] [--prompts 8] [--group 4] [--completion 32]

Our side runs with this interpreter, TRL's with `--peer-python` (default `.venv-bench/bin/python`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def build_model(path: Path, layers: int, hidden: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from aworld_train.rollout.policies.models import load_tokenizer

    tokenizer = load_tokenizer("embedded:smollm2-135m")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=max(1, hidden // 192),
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)


def prompts(n: int) -> list[str]:
    return [
        f"Question {i}: write a short sentence about the number {i * 7} and its neighbours, please."
        for i in range(n)
    ]


def half_vocab_reward(token_ids: list[int], vocab: int) -> float:
    return sum(t < vocab // 2 for t in token_ids) / max(len(token_ids), 1)


def sampled_step(policy, tokenizer, args, step: int) -> list:
    """One step's samples from our policy: each prompt's group of `args.completion` tokens (no stop
    token, so every completion has that length), scored by the half-vocabulary reward."""
    import asyncio

    from aworld_train.engines.local.samples import build_samples
    from aworld_train.rollout.episodes.single_turn import sample_groups
    from aworld_train.rollout.policies.client import SamplingParams

    ids = [tokenizer.encode(p) for p in prompts(args.prompts)]
    vocab = len(tokenizer)
    sampling = SamplingParams(max_new_tokens=args.completion, temperature=1.0, seed=step)
    trajs = asyncio.run(
        sample_groups(policy, ids, args.group, sampling, lambda p, g: half_vocab_reward(g.token_ids, vocab))
    )
    return build_samples(trajs, [t.task_id for t in trajs])[0]


def run_ours(args) -> dict:
    import torch

    from aworld_train.engines.local.learner import GRPOLearner
    from aworld_train.inputs.config import AlgorithmConfig
    from aworld_train.rollout.policies.local import LocalPolicy
    from aworld_train.rollout.policies.models import load_model, load_tokenizer

    tokenizer = load_tokenizer(args.model)
    model = load_model(args.model, dtype=torch.float32)
    # no stop token: every completion runs to the same length on both sides
    policy = LocalPolicy(model, tokenizer, stop_token_ids=[-1], max_batch_size=args.prompts * args.group)
    algo = AlgorithmConfig(
        group_size=args.group, lr=1e-5, clip_low=0.2, clip_high=0.28, micro_batch_tokens=1 << 20
    )
    learner = GRPOLearner(model, algo, 1.0, policy.pad_id, lock=policy.lock)
    times = []
    for step in range(args.steps + 1):
        started = time.perf_counter()
        learner.step(sampled_step(policy, tokenizer, args, step))
        if step:  # the first step warms up
            times.append(time.perf_counter() - started)
    return {"step_s": sum(times) / len(times)}


def run_trl(args) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(args.model)
    model.generation_config.eos_token_id = None  # same as ours: run to the full length
    vocab = len(tokenizer)

    def reward(completion_ids, **kwargs):
        return [half_vocab_reward(ids, vocab) for ids in completion_ids]

    times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.started = time.perf_counter()

        def on_step_end(self, *a, **k):
            times.append(time.perf_counter() - self.started)

    out = tempfile.mkdtemp()
    config = GRPOConfig(
        output_dir=out,
        use_cpu=True,
        per_device_train_batch_size=args.prompts * args.group,
        num_generations=args.group,
        max_completion_length=args.completion,
        num_iterations=1,
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        learning_rate=1e-5,
        max_steps=args.steps + 1,
        logging_steps=1000,
        save_strategy="no",
        report_to="none",
        temperature=1.0,
        loss_type="dapo",
        disable_tqdm=True,
    )
    data = Dataset.from_list([{"prompt": p} for p in prompts(args.prompts)] * (args.steps + 2))
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=data,
        processing_class=tokenizer,
        callbacks=[Timer()],
    )
    trainer.train()
    measured = times[1:]
    return {"step_s": sum(measured) / len(measured)}


def child(args) -> None:
    result = run_ours(args) if args.impl == "ours" else run_trl(args)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(result))


def child_result(cmd: list[str], what: str) -> dict:
    """Run one measured mode in a process of its own (its peak RSS is its own) and read the
    `RESULT {json}` line it prints; exit with its stderr's tail if it printed none."""
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        sys.exit(f"{what} failed:\n{proc.stderr[-4000:]}")
    return json.loads(line[len("RESULT ") :])


ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--peer-python",
        default=str(ROOT / ".venv-bench" / "bin" / "python"),
        help="the interpreter of the venv TRL is installed in (make bench-env)",
    )
    parser.add_argument("--impl", choices=["ours", "trl"])
    parser.add_argument("--model")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--completion", type=int, default=32)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    args = parser.parse_args()
    if args.impl:
        child(args)
        return
    if not Path(args.peer_python).is_file():
        sys.exit(f"TRL runs in a venv of its own and {args.peer_python} is missing: run `make bench-env`")
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        build_model(model, args.layers, args.hidden)
        results = {}
        for impl in ("ours", "trl"):
            python = sys.executable if impl == "ours" else args.peer_python
            cmd = [python, __file__, "--impl", impl, "--model", str(model)]
            cmd += [
                "--steps",
                str(args.steps),
                "--prompts",
                str(args.prompts),
                "--group",
                str(args.group),
                "--completion",
                str(args.completion),
            ]
            results[impl] = child_result(cmd, impl)
    ours, trl = results["ours"], results["trl"]
    print(
        f"batch: {args.prompts} prompts x {args.group} samples, {args.completion} completion tokens, {args.steps} measured steps"
    )
    print(f"model: random Llama, {args.layers} layers, hidden {args.hidden}, vocab 49152")
    print(f"{'':10}{'step s':>10}{'peak RSS MB':>14}")
    for name, r in (("aworld", ours), ("trl", trl)):
        print(f"{name:10}{r['step_s']:>10.2f}{r['peak_rss_mb']:>14.0f}")
    print(
        f"ratio aworld/trl: step time {ours['step_s'] / trl['step_s']:.2f}x, peak memory {ours['peak_rss_mb'] / trl['peak_rss_mb']:.2f}x"
    )


if __name__ == "__main__":
    main()
