"""GRPO math against hand-computed values (and verl's functions, where verl is installed)."""

import math

import pytest
import torch

from aworld_train.engines.local.grpo import aggregate, kl_k3, policy_loss, token_logprobs
from aworld_train.engines.local.samples import Sample, build_samples, micro_batches
from aworld_train.rollout.episodes.trajectory import Trajectory
from aworld_train.rollout.samples.codec import group_advantages
from aworld_train.rollout.tokens.ledger import Segment


def test_group_normalised_advantages():
    adv = group_advantages([1, 0, 0, 1], ["a"] * 4)
    expected = 0.5 / math.sqrt(1 / 3)  # unbiased std of {1,0,0,1} is sqrt(1/3)
    assert adv == pytest.approx([expected, -expected, -expected, expected], rel=1e-5)
    assert group_advantages([1, 0, 0, 1], ["a"] * 4, norm_by_std=False) == pytest.approx(
        [0.5, -0.5, -0.5, 0.5]
    )
    assert group_advantages([1.0, 0.0, 5.0], ["x", "x", "y"]) == pytest.approx(
        [0.7071, -0.7071, 0.0], abs=1e-4
    )
    assert group_advantages([1, 1, 1], ["g"] * 3) == [0.0, 0.0, 0.0]


def test_clipped_policy_loss_by_hand():
    logp = torch.tensor([[-1.0, -2.0]])
    old = torch.tensor([[-1.1, -1.5]])
    mask = torch.ones(1, 2)
    r1, r2 = math.exp(0.1), math.exp(-0.5)
    loss, stats = policy_loss(logp, old, torch.tensor([[1.0]]), mask, 0.2, 0.28)
    assert float(loss) == pytest.approx((-r1 - r2) / 2, rel=1e-5)  # neither side clips for A > 0 here
    loss, stats = policy_loss(logp, old, torch.tensor([[-1.0]]), mask, 0.2, 0.28)
    assert float(loss) == pytest.approx((r1 + 0.8) / 2, rel=1e-5)  # token 2 clipped at 1 - 0.2
    assert stats["clip_frac"] == pytest.approx(0.5)
    high, _ = policy_loss(
        torch.tensor([[0.0]]), torch.tensor([[-1.0]]), torch.tensor([[2.0]]), torch.ones(1, 1), 0.2, 0.28
    )
    assert float(high) == pytest.approx(-2.0 * 1.28)  # clip_high bounds the gain


def test_loss_aggregation_modes():
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert float(aggregate(per_token, mask, "token-mean")) == pytest.approx(2.5)
    assert float(aggregate(per_token, mask, "seq-mean-token-mean")) == pytest.approx(3.0)


def test_k3_kl_by_hand():
    assert float(kl_k3(torch.tensor(-1.0), torch.tensor(-2.0))) == pytest.approx(math.exp(-1) + 1 - 1)
    assert float(kl_k3(torch.tensor(-1.0), torch.tensor(-1.0))) == 0.0


def test_token_logprobs_match_log_softmax():
    logits = torch.randn(2, 3, 11)
    targets = torch.randint(0, 11, (2, 3))
    expected = torch.log_softmax(logits / 0.7, -1).gather(-1, targets[..., None]).squeeze(-1)
    torch.testing.assert_close(token_logprobs(logits, targets, 0.7), expected)


def _traj(reward, status="ok", mask=(1, 1)):
    t = Trajectory(episode_id="e", task_id="t", status=status, reward=reward)
    t.segments = [Segment([1, 2], [3, 4], list(mask), [-0.1, -0.2])]
    return t


def test_failed_episodes_carry_no_loss_and_do_not_shift_their_group():
    trajs = [_traj(1.0), _traj(0.0), _traj(None, "tool_timeout"), _traj(0.0, "malformed_tool_call")]
    samples, adv = build_samples(trajs, ["g"] * 4)
    assert len(samples) == 2 and adv[2] == 0.0 and adv[3] == 0.0
    assert adv[0] == pytest.approx(-adv[1]) and adv[0] > 0
    samples, adv = build_samples(trajs, ["g"] * 4, train_on_malformed=True)
    assert len(samples) == 3 and adv[3] < 0  # a malformed call counts as a reward-0 sample


def test_micro_batches_respect_the_token_budget():
    samples = [Sample(list(range(n)), 1, [1] * (n - 1), [0.0] * (n - 1), 0.0) for n in (10, 20, 30, 40, 100)]
    batches = micro_batches(samples, 64)
    assert sorted(len(s) for b in batches for s in b) == [10, 20, 30, 40, 100]
    for b in batches:
        assert len(b) == 1 or max(len(s) for s in b) * len(b) <= 64


def test_equal_to_verls_own_functions_where_verl_is_installed():
    """Same tensors through verl 0.9.1's GRPO advantage and vanilla policy loss.

    verl also applies dual-clip (clip_ratio_c=3) for negative advantages; the ratios here stay below 3.
    """
    core = pytest.importorskip("verl.trainer.ppo.core_algos")
    import numpy as np
    from verl.utils.config import omega_conf_to_dataclass

    from aworld_train.engines.verl.verl_config import verl_defaults

    cfg = verl_defaults(
        [
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
            "actor_rollout_ref.actor.clip_ratio_low=0.2",
            "actor_rollout_ref.actor.clip_ratio_high=0.28",
        ]
    )
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    torch.manual_seed(0)
    logp, old = torch.randn(4, 6) * 0.3 - 1, torch.randn(4, 6) * 0.3 - 1
    adv = torch.randn(4, 1).expand(4, 6).contiguous()
    mask = torch.ones(4, 6)
    mask[1, 4:] = 0
    assert float(torch.exp(logp - old).max()) < 3
    for mode in ("token-mean", "seq-mean-token-mean"):
        ours, stats = policy_loss(logp, old, adv, mask, 0.2, 0.28, mode)
        theirs, _ = core.compute_policy_loss_vanilla(old, logp, adv, mask, loss_agg_mode=mode, config=actor)
        assert float(ours) == pytest.approx(float(theirs), rel=1e-6)
    assert stats["clip_frac"] > 0  # the clip was exercised
    rewards = [1.0, 0.0, 0.0, 1.0, 0.5, 0.0]
    index = ["a", "a", "a", "a", "b", "b"]
    scores = torch.zeros(6, 5)
    scores[:, -1] = torch.tensor(rewards)
    verl_adv, _ = core.compute_grpo_outcome_advantage(scores, torch.ones(6, 5), np.array(index))
    assert verl_adv[:, 0].tolist() == pytest.approx(group_advantages(rewards, index), rel=1e-5)
