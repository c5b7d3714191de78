"""Step time and peak memory of the local GRPO backend with a LoRA adapter against full fine-tuning.

The embedded model (SmolLM2-135M), in the dtype a run would load it in, the same batch for both
(prompts x group, completions of a fixed length, the single-turn task of bench/local_step.py).
Each mode runs in its own process so that its peak RSS is its own; the ratios are printed.

    .venv/bin/python bench/local_lora_step.py [--steps 3] [--prompts 4] [--group 4] [--completion 32] [--rank 16]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

from local_step import child_result, sampled_step  # the same task as the TRL comparison

MODEL = "embedded:smollm2-135m"


def current_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_mode(args) -> dict:
    from aworld_train.engines.local import lora
    from aworld_train.engines.local.learner import GRPOLearner
    from aworld_train.inputs.config import AlgorithmConfig, LoraConfig
    from aworld_train.rollout.policies.local import LocalPolicy
    from aworld_train.rollout.policies.models import load_model, load_tokenizer

    tokenizer = load_tokenizer(MODEL)
    model = load_model(MODEL)
    settings = LoraConfig(rank=args.rank, alpha=2 * args.rank) if args.mode == "lora" else None
    if settings is not None:
        model = lora.attach(model, settings)
    loaded_mb = current_rss_mb()  # the runtime and the model: what both modes pay before training
    # no stop token: every completion runs to the same length in both modes
    policy = LocalPolicy(model, tokenizer, stop_token_ids=[-1], max_batch_size=args.prompts * args.group)
    algo = AlgorithmConfig(group_size=args.group, lr=1e-5, micro_batch_tokens=4096, lora=settings)
    learner = GRPOLearner(model, algo, 1.0, policy.pad_id, lock=policy.weights_update)
    times, updates, mismatch = [], [], []
    for step in range(args.steps + 1):
        started = time.perf_counter()
        samples = sampled_step(policy, tokenizer, args, step)
        if not step:  # the peak sampling alone reaches (before any update)
            sampling_peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        learn_started = time.perf_counter()
        metrics = learner.step(samples)
        if step:  # the first step warms up
            times.append(time.perf_counter() - started)
            updates.append(time.perf_counter() - learn_started)
            mismatch.append(metrics["logprob_mismatch_mean"])
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {
        "step_s": sum(times) / len(times),
        "update_s": sum(updates) / len(updates),
        "mismatch": max(mismatch),
        "trainable": trainable,
        "loaded_mb": loaded_mb,
        "sampling_peak_mb": sampling_peak_mb,
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["full", "lora"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--completion", type=int, default=32)
    parser.add_argument("--rank", type=int, default=16)
    args = parser.parse_args()
    if args.mode:
        result = run_mode(args)
        result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print("RESULT " + json.dumps(result))
        return
    results = {}
    for mode in ("full", "lora"):
        cmd = [sys.executable, __file__, "--mode", mode]
        for flag in ("steps", "prompts", "group", "completion", "rank"):
            cmd += [f"--{flag}", str(getattr(args, flag))]
        results[mode] = child_result(cmd, mode)
    full, adapter = results["full"], results["lora"]
    print(
        f"model: {MODEL} ({full['dtype']}); batch: {args.prompts} prompts x {args.group} samples, "
        f"{args.completion} completion tokens, {args.steps} measured steps; LoRA rank {args.rank}, all-linear"
    )
    # loaded: the runtime and the model; sampling: the peak after the first rollout, before any update
    print(
        f"{'':6}{'trained weights':>16}{'step s':>9}{'update s':>10}{'loaded MB':>11}{'sampling MB':>13}"
        f"{'peak RSS MB':>13}{'peak - loaded':>15}{'mismatch':>10}"
    )
    for name, r in (("full", full), ("lora", adapter)):
        print(
            f"{name:6}{r['trainable']:>16,}{r['step_s']:>9.2f}{r['update_s']:>10.2f}{r['loaded_mb']:>11.0f}"
            f"{r['sampling_peak_mb']:>13.0f}{r['peak_rss_mb']:>13.0f}{r['peak_rss_mb'] - r['loaded_mb']:>15.0f}"
            f"{r['mismatch']:>10.5f}"
        )
    grown = (adapter["peak_rss_mb"] - adapter["loaded_mb"]) / (full["peak_rss_mb"] - full["loaded_mb"])
    print(
        f"ratio lora/full: step time {adapter['step_s'] / full['step_s']:.2f}x, "
        f"update time {adapter['update_s'] / full['update_s']:.2f}x, "
        f"peak memory {adapter['peak_rss_mb'] / full['peak_rss_mb']:.2f}x "
        f"(what training adds to the loaded process: {grown:.2f}x)"
    )


if __name__ == "__main__":
    main()
