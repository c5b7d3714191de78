"""AReaL's own advantage computation on a batch shaped as our workflow returns it, under a rendered config.

Run it with the Python of an environment that has areal==1.0.4 (scripts/areal/install_cpu_env.sh):

    /tmp/areal-venv/bin/python scripts/areal/check_advantages.py RUN/areal/areal_config.yaml

Our workflow runs each task's group itself and gives each trained row its GRPO advantage as
its reward; a failed episode gives no row. This feeds such a group (one episode of four
failed) to AReaL's `PPOActor._compute_advantages` under the rendered config and checks that
every loss token's advantage is its episode's advantage over the three that count, i.e.
that the render leaves no AReaL normalisation, discount or KL term between the two.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_config import load  # noqa: E402


def row(prompt: int, response: int, reward: float) -> dict[str, torch.Tensor]:
    length = prompt + response
    values = {
        "input_ids": torch.arange(1, length + 1, dtype=torch.int32),
        "loss_mask": torch.tensor([0] * prompt + [1] * response, dtype=torch.int32),
        "logprobs": torch.tensor([0.0] * prompt + [-0.5] * response, dtype=torch.float32),
        "versions": torch.tensor([-1] * prompt + [0] * response, dtype=torch.int32),
        "attention_mask": torch.ones(length, dtype=torch.bool),
        "rewards": torch.tensor(reward, dtype=torch.float32),
    }
    return {key: value.unsqueeze(0) for key, value in values.items()}


def main(argv: list[str]) -> int:
    from areal.trainer.ppo.actor import PPOActor
    from areal.utils.data import concat_padded_tensors

    from aworld_train.rollout.codec import group_advantages

    config = load(Path(argv[0]), argv[1:])
    raw = {"a": 1.0, "b": 0.0, "c": 1.0}  # a fourth episode of the group failed: it has no row
    advantages = dict(zip(raw, group_advantages(list(raw.values()), [0] * len(raw)), strict=True))
    shapes = {"a": (7, 5), "b": (7, 9), "c": (7, 3)}
    batch = concat_padded_tensors([row(*shapes[name], advantages[name]) for name in raw])
    batch["prox_logp"] = torch.roll(batch["logprobs"], shifts=-1, dims=-1)
    out = PPOActor(config.actor, engine=None)._compute_advantages(batch)
    failures = []
    for i, name in enumerate(raw):
        mask = out["loss_mask"][i].bool()
        got = out["advantages"][i][mask]
        if not torch.allclose(got, torch.full_like(got, advantages[name]), atol=1e-5):
            failures.append(f"episode {name}: advantages {got.tolist()} != {advantages[name]:.6f}")
    for line in failures:
        print("FAIL", line)
    if not failures:
        print(f"ok: AReaL's advantages equal the group's without its failed episode: {advantages}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
