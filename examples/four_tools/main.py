"""The four-tool assistant trained with GRPO, with the flags its users already type.

python examples/four_tools/main.py --model_name embedded:smollm2-135m \
    --data_path examples/four_tools/train.jsonl --output_dir runs/four_tools \
    --learning_rate 2e-5 --num_generations 4 --max_new_tokens 48 --temperature 0.7 --seed 42 [--bf16]

Flags map onto the config (examples/four_tools/grpo_local.yaml, or grpo_verl.yaml with
--backend verl); anything else goes as trailing key.sub=value overrides.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from aworld_train import AgentTrainer
from aworld_train.agents.four_tools import build_agent
from aworld_train.rollout.policies.models import DTYPE_VARIABLE

HERE = Path(__file__).parent


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model_name", default="embedded:smollm2-135m")
    p.add_argument(
        "--data_path", default=str(HERE / "train.jsonl"), help="training tasks (jsonl/json/parquet)"
    )
    p.add_argument("--test_path", default=str(HERE / "test.jsonl"), help="held-out tasks")
    p.add_argument("--output_dir", default="runs/four_tools", help="the run folder")
    p.add_argument("--learning_rate", type=float, default=2e-5)
    p.add_argument("--num_generations", type=int, default=4, help="samples per task (GRPO's group)")
    p.add_argument("--max_new_tokens", type=int, default=48)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--bf16", action="store_true", help="load the model in bfloat16")
    p.add_argument("--batch_size", type=int, default=4, help="tasks per step")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--backend", choices=["local", "verl"], default="local")
    p.add_argument("overrides", nargs="*", help="key.sub=value config overrides")
    return p.parse_args(argv)


def overrides(args: argparse.Namespace) -> list[str]:
    return [
        f"model={args.model_name}",
        f"trainer.run_dir={args.output_dir}",
        f"algorithm.lr={args.learning_rate}",
        f"algorithm.group_size={args.num_generations}",
        f"rollout.max_new_tokens={args.max_new_tokens}",
        f"rollout.temperature={args.temperature}",
        f"trainer.seed={args.seed}",
        f"data.batch_size={args.batch_size}",
        f"trainer.steps={args.steps}",
        *args.overrides,
    ]


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    if args.bf16:
        os.environ[DTYPE_VARIABLE] = "bfloat16"
    config = HERE / ("grpo_local.yaml" if args.backend == "local" else "grpo_verl.yaml")
    trainer = AgentTrainer(
        agent=build_agent(),
        config=str(config),
        train_dataset=args.data_path,
        test_dataset=args.test_path,
        overrides=overrides(args),
    )
    return trainer.train()


if __name__ == "__main__":
    print(json.dumps(main(), indent=2, default=str))
