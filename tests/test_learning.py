"""GRPO learns: on a random tiny model, a reward that depends on a token choice rises clearly."""

import asyncio

import pytest
import torch

from aworld_train.engines.local.learner import GRPOLearner
from aworld_train.engines.local.samples import build_samples
from aworld_train.inputs.config import AlgorithmConfig
from aworld_train.rollout.episodes.single_turn import sample_groups
from aworld_train.rollout.policies.client import SamplingParams
from aworld_train.rollout.policies.local import LocalPolicy
from aworld_train.rollout.policies.models import load_model


def test_reward_rises_on_a_token_choice_task(tiny_model_dir, tokenizer, stop_ids):
    torch.manual_seed(0)
    model = load_model(str(tiny_model_dir), dtype=torch.float32)
    half = len(tokenizer) // 2

    def reward(prompt, gen):
        # the choice: the first sampled token from the lower half of the vocabulary
        return 1.0 if gen.token_ids and gen.token_ids[0] < half else 0.0

    policy = LocalPolicy(model, tokenizer, stop_ids)
    algo = AlgorithmConfig(group_size=8, lr=2e-3, micro_batch_tokens=4096)
    learner = GRPOLearner(model, algo, temperature=1.0, pad_id=policy.pad_id, lock=policy.lock)
    prompts = [tokenizer.encode(f"Pick a word number {i}:") for i in range(8)]
    curve = []
    for step in range(10):
        sampling = SamplingParams(max_new_tokens=2, temperature=1.0, seed=step)
        trajs = asyncio.run(sample_groups(policy, prompts, algo.group_size, sampling, reward))
        curve.append(sum(t.reward for t in trajs) / len(trajs))
        samples, _ = build_samples(trajs, [t.task_id for t in trajs])
        metrics = learner.step(samples)
        if step == 0:
            # on-policy: the trainer's recomputed logprobs equal the sampler's
            assert metrics["logprob_mismatch_mean"] < 1e-4
    start, late = curve[0], sum(curve[-4:]) / 4
    assert start < 0.75, curve  # the untrained model has no preference
    assert late > start + 0.25 and late > 0.9, curve


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_micro_batching_does_not_change_the_gradient(tiny_model_dir, tokenizer, stop_ids, agg):
    """One big micro-batch and many small ones give the same update."""
    grads = []
    for budget in (100000, 64):
        torch.manual_seed(1)
        model = load_model(str(tiny_model_dir), dtype=torch.float32)
        policy = LocalPolicy(model, tokenizer, stop_ids)
        trajs = asyncio.run(
            sample_groups(
                policy,
                [tokenizer.encode("a b"), tokenizer.encode("a much longer prompt here")],
                4,
                SamplingParams(max_new_tokens=6, seed=5),
                lambda p, g: float(g.token_ids[0] % 2),
            )
        )
        samples, _ = build_samples(trajs, [t.task_id for t in trajs])
        learner = GRPOLearner(
            model,
            AlgorithmConfig(micro_batch_tokens=max(budget, 64), loss_agg_mode=agg, grad_clip=1e9),
            1.0,
            policy.pad_id,
        )
        learner.optimizer.step = lambda: None  # keep the weights, look at the gradient
        learner.optimizer.zero_grad = lambda set_to_none=True: None
        assert any(s.advantage != 0 for s in samples)
        learner.step(samples)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=1e-4)
