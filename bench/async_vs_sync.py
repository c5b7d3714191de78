"""Asynchronous against synchronous local training, on a tool with a long-tailed latency.

The calculator agent, the local backend and the embedded model; the calculator's latency is
log-normal (CALCULATOR_LATENCY_P50_S / _P99_S, seeded). Each episode's first reply is a scripted
calculate call (the small model rarely writes one itself, and the bench is about the tool's wait),
of the wrong expression for about half the episodes (by their seed), so that groups differ and
the learner has gradients to compute; the answer after the tool result is the model's own,
sampled and trained. Every setting trains the
same steps of the same batches (same seed, same number of groups); printed per setting: the
training loop's time per step, the share of it the learner waited for episodes, staleness and
groups dropped, the ratio of its total to the synchronous one's, and the accuracy of the trained
weights on held-out tasks (each with the right calculate call scripted, so that what is measured is
the answer the model writes after the tool's result). With several seeds, every setting runs once
per seed and the accuracies' spread across seeds is printed beside each setting's.

With `--sampler vllm` vLLM's own server samples (`rollout.engine: vllm`, `make setup-vllm`), in a
process of its own, so that sampling and learning share the two cores as they would a GPU's two
jobs; the scripted calls are then scored by a copy of the weights vLLM was last pushed.

    python bench/async_vs_sync.py [--steps 6] [--staleness 0 1 2] [--p50 0.3] [--p99 8] [--seeds 0 1]
                                  [--sampler transformers|vllm]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import os
import tempfile
import threading
import time
from pathlib import Path

import torch
from scripted import MODEL, calculator_script

ROWS = [{"prompt": f"What is {i} * 7?", "ground_truth": i * 7} for i in range(32)]
HELD_OUT = [{"prompt": f"What is {i} * 7?", "ground_truth": i * 7} for i in range(100, 132)]


class SamplerWeights:
    """The transformers sampler's own model and version, held still while a scripted call is scored."""

    def __init__(self, policy) -> None:
        self.policy = policy

    @contextlib.contextmanager
    def held(self):
        with self.policy.lock.mutex:  # the weights and their version as one
            yield self.policy.model, self.policy.version


class PushedWeights:
    """A copy of the weights vLLM was last pushed and their version (the trained model moves during
    an update while vLLM samples on with the weights before it), refreshed after each push."""

    def __init__(self, policy) -> None:
        self.model = copy.deepcopy(policy.trained).eval()
        self.version = policy.version
        self.lock = threading.Lock()
        push = policy.push

        def push_then_copy(version=None):
            push(version)
            with self.lock, policy.lock:
                self.model.load_state_dict(policy.trained.state_dict())
                self.version = policy.version

        policy.push = push_then_copy

    @contextlib.contextmanager
    def held(self):
        with self.lock:
            yield self.model, self.version


class ToolCallFirst:
    """The run's policy, each episode's first reply scripted as a calculate call (with the logprobs
    and version of the weights it runs beside, like the policy's own tokens); every later reply the
    model's."""

    def __init__(self, policy, tokenizer, weights) -> None:
        self.policy = policy
        self.weights = weights
        self.tokenizer = tokenizer
        self.script = calculator_script(tokenizer)
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.wrong_calls = True  # off for the held-out evaluation

    def __getattr__(self, name):  # lock, version, pad_id, ...: the policy's
        return getattr(self.policy, name)

    async def generate(self, prompt_ids, sampling):
        from aworld_train.rollout.policies.client import Generation

        text = self.tokenizer.decode(prompt_ids)
        if "<tool_response>" in text[text.rindex("What is") :]:
            return await self.policy.generate(prompt_ids, sampling)
        call = self.script(prompt_ids)
        if (
            self.wrong_calls and (sampling.seed or 0) % 2
        ):  # a wrong expression: the answer it leads to earns 0
            call = call.replace(" * 7", " * 8")
        ids = self.tokenizer.encode(call, add_special_tokens=False) + [self.end]
        logprobs, version = await asyncio.to_thread(self.score, prompt_ids, ids, sampling.temperature)
        return Generation(ids, logprobs, "stop", versions=[version] * len(ids))

    @torch.no_grad()
    def score(self, prompt_ids: list[int], ids: list[int], temperature: float) -> tuple[list[float], int]:
        """The scripted tokens' logprobs under the current weights, as the policy computes a sampled
        token's (log_softmax of logits / temperature), and those weights' version: the learner then
        sees the script as tokens these weights could have sampled, not as a logprob mismatch."""
        with self.weights.held() as (model, version):
            logits = model(torch.tensor([prompt_ids + ids], device=model.device)).logits
            logits = logits[0, len(prompt_ids) - 1 : -1].float() / (temperature if temperature > 0 else 1.0)
            logprobs = torch.log_softmax(logits, -1).gather(
                -1, torch.tensor(ids, device=logits.device)[:, None]
            )
            return logprobs[:, 0].tolist(), version


def run_config(staleness: int, seed: int, args, folder: Path) -> dict:
    """The calculator agent's run with `max_staleness` `staleness`, its tool's latency seeded by `seed`."""
    latency = {
        "CALCULATOR_LATENCY_P50_S": str(args.p50),
        "CALCULATOR_LATENCY_P99_S": str(args.p99),
        "CALCULATOR_LATENCY_SEED": str(seed),
    }
    return {
        "model": MODEL,
        "agent": "aworld_train.agents.calculator:build_agent",
        "algorithm": {"group_size": args.group, "lr": 1e-5, "max_staleness": staleness},
        "rollout": {
            "max_new_tokens": 8,
            "max_assistant_turns": 3,
            "tool_block": "never",
            "concurrency": 64,
            "engine": args.sampler,
        },
        "data": {"batch_size": args.batch},
        "reward": {"fn": "aworld_train.rewards.calculator:exact_answer"},
        "trainer": {
            "steps": args.steps,
            "seed": seed,
            "save_every": 0,
            "eval_every": 0,
            "eval_before": True,
            "eval_after": True,
            "run_dir": str(folder / f"seed_{seed}_staleness_{staleness}"),
            "log_trajectories": 0,
        },
        "env": [{"name": "calculator", "env": latency}],
    }


def run(staleness: int, seed: int, args, folder: Path) -> dict:
    from aworld_train import AgentTrainer
    from aworld_train.engines.local.training import LocalTraining

    config = run_config(staleness, seed, args, folder)
    trainer = AgentTrainer(config=config, train_dataset=ROWS, test_dataset=HELD_OUT)
    training = LocalTraining(trainer.run_inputs())
    policy = training.policy
    weights = PushedWeights(policy) if args.sampler == "vllm" else SamplerWeights(policy)
    training.policy = scripted = ToolCallFirst(policy, training.tokenizer, weights)
    accuracy: dict[str, float] = {}
    evaluate = training.evaluate

    def evaluate_with_right_calls(name: str, step: int):
        scripted.wrong_calls = False
        try:
            report = evaluate(name, step)
        finally:
            scripted.wrong_calls = True
        accuracy[name] = report.accuracy
        return report

    training.evaluate = evaluate_with_right_calls
    started = time.perf_counter()
    training.run()  # closes vLLM's server, where it samples
    wall = time.perf_counter() - started
    rows = [json.loads(line) for line in (Path(config["trainer"]["run_dir"]) / "metrics.jsonl").open()]
    return {
        "staleness": staleness,
        "wall_s": wall,
        **step_figures(rows),
        "accuracy_before": accuracy["before"],
        "accuracy": accuracy["after"],
    }


def step_figures(rows: list[dict]) -> dict:
    """The training steps' figures from the run's metrics.jsonl rows."""
    steps = [r for r in rows if r["phase"] == "train"]
    loop_s = sum(r["step_s"] for r in steps)
    return {
        "step_s": loop_s / len(steps),
        "loop_s": loop_s,
        "idle_share": sum(r["rollout_s"] for r in steps) / loop_s,
        "update_s": sum(r["update_s"] for r in steps) / len(steps),
        "staleness_mean": sum(r.get("staleness_mean", 0.0) for r in steps) / len(steps),
        "dropped": sum(r.get("dropped_stale", 0.0) for r in steps),
        "samples": sum(r.get("samples", 0.0) for r in steps),
        "reward": sum(r["reward_mean"] for r in steps) / len(steps),
    }


def spread(values: list[float]) -> str:
    return f"{min(values):.3f}-{max(values):.3f}" if len(values) > 1 else f"{values[0]:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--group", type=int, default=2)
    parser.add_argument(
        "--staleness", type=int, nargs="+", default=[0, 1, 2], help="0 is the synchronous run"
    )
    parser.add_argument("--p50", type=float, default=0.3, help="the tool's median latency, s")
    parser.add_argument("--p99", type=float, default=8.0, help="the tool's 99th percentile latency, s")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--sampler", choices=["transformers", "vllm"], default="transformers")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    accuracies: dict[int, list[float]] = {s: [] for s in args.staleness}
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            results = [run(s, seed, args, Path(tmp)) for s in args.staleness]
        base = next((r for r in results if r["staleness"] == 0), results[0])
        print(
            f"{args.steps} steps x {args.batch} tasks x {args.group} samples; tool latency log-normal "
            f"p50 {args.p50} s, p99 {args.p99} s; sampler {args.sampler}; seed {seed}; held-out {len(HELD_OUT)} tasks, "
            f"accuracy before training {results[0]['accuracy_before']:.3f}"
        )
        print(
            "max_staleness  s/step  update s  loop s  wall s  learner idle  staleness  dropped  samples  reward  "
            "held-out acc  loop vs sync"
        )
        for r in results:
            accuracies[r["staleness"]].append(r["accuracy"])
            print(
                f"{r['staleness']:>13}  {r['step_s']:6.2f}  {r['update_s']:8.2f}  {r['loop_s']:6.1f}  "
                f"{r['wall_s']:6.1f}  {r['idle_share']:12.0%}  {r['staleness_mean']:9.2f}  {r['dropped']:7.0f}  "
                f"{r['samples']:7.0f}  {r['reward']:6.3f}  {r['accuracy']:12.3f}  {r['loop_s'] / base['loop_s']:12.2f}",
                flush=True,
            )
    if len(args.seeds) > 1:
        print(f"held-out accuracy across seeds {args.seeds} (min-max):")
        for staleness, values in accuracies.items():
            print(f"  max_staleness {staleness}: mean {sum(values) / len(values):.3f}, {spread(values)}")


if __name__ == "__main__":
    main()
