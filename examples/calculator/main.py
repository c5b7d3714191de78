"""The demo through the Python API: same agent, data, reward and config as `make demo`.

python examples/calculator/main.py [key.sub=value ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

from aworld_train import AgentTrainer
from aworld_train.agents.calculator import build_agent
from aworld_train.rewards.calculator import exact_answer

HERE = Path(__file__).parent


def main(overrides: list[str]) -> dict:
    trainer = AgentTrainer(
        agent=build_agent(),
        config=str(HERE / "grpo_local.yaml"),
        reward_func=exact_answer,
        train_dataset=str(HERE / "train.jsonl"),
        test_dataset=str(HERE / "test.jsonl"),
        overrides=overrides,
    )
    return trainer.train()


if __name__ == "__main__":
    print(main(sys.argv[1:]))
