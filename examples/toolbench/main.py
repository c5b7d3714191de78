"""ToolBench tasks trained with GRPO through the Python API.

python examples/toolbench/main.py [--config examples/toolbench/grpo_verl.yaml] [--render] [key.sub=value ...]

With the native verl YAML (grpo_toolbench_trainer.yaml) start the tool servers first (see its header).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from aworld_train import AgentTrainer
from aworld_train.agents.toolbench import build_agent
from aworld_train.rewards.toolbench import toolbench_reward

HERE = Path(__file__).parent


def main(argv: list[str] | None = None) -> dict | str:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=str(HERE / "grpo_verl.yaml"))
    p.add_argument("--train", default=str(HERE / "train.jsonl"))
    p.add_argument("--val", default=str(HERE / "val.jsonl"))
    p.add_argument("--render", action="store_true", help="write the run folder without training")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args(argv)
    trainer = AgentTrainer(
        agent=build_agent(),
        config=args.config,
        reward_func=toolbench_reward,
        train_dataset=args.train,
        test_dataset=args.val,
        overrides=args.overrides,
    )
    if args.render:
        return str(trainer.render().folder)
    return trainer.train()


if __name__ == "__main__":
    print(json.dumps(main(), indent=2, default=str))
