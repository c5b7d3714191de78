"""Train the GAIA agent with verl, in the style of AWorld's training guide.

    python examples/train_gaia_with_aworld_verl/main.py [--gaia-dir PATH/2023/validation] [--render-only]

Without --gaia-dir it uses the small GAIA-format sample beside this file. With GAIA
itself (downloaded from its dataset page into a folder of your choice), pass the split
folder that holds metadata.jsonl and the attachments.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from aworld_train import AgentTrainer
from aworld_train.agents.gaia import build_agent
from aworld_train.env.gaia.data import attachments_dir, load_gaia
from aworld_train.rewards.gaia import gaia_reward

HERE = Path(__file__).parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gaia-dir", default=str(HERE / "gaia_sample" / "2023" / "validation"))
    parser.add_argument("--test-size", type=int, default=3)
    parser.add_argument("--render-only", action="store_true", help="write the verl run folder, do not launch")
    args = parser.parse_args()

    rows = load_gaia(args.gaia_dir)
    # The documents server reads the attachments from the split folder.
    os.environ["GAIA_FILES_DIR"] = str(attachments_dir(args.gaia_dir))
    trainer = AgentTrainer(
        agent=build_agent(),
        config=str(HERE / "grpo_trainer.yaml"),
        reward_func=gaia_reward,
        train_dataset=rows[: -args.test_size],
        test_dataset=rows[-args.test_size :],
    )
    if args.render_only:
        from aworld_train.engines.verl.render import render

        print(f"run folder: {render(trainer).folder}")
        return
    trainer.train()


if __name__ == "__main__":
    main()
