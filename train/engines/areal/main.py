"""Entry point `aworld-train run` launches for backend: areal (in an environment with AReaL).

    python -m aworld_train.engines.areal.main --config RUN/areal/areal_config.yaml [key=value ...]

AReaL loads the config (its defaults fill what the file leaves out), its trainer
starts the rollout and training workers with the configured scheduler, and every
sample runs our AWorldWorkflow with the kwargs in the run folder's workflow.yaml.
On a CPU (workflow.yaml's `cpu_server`), our policy server takes SGLang's place.
"""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import yaml


def config_path(argv: list[str]) -> Path:
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith("--config="):
            return Path(arg.split("=", 1)[1])
    raise SystemExit("usage: python -m aworld_train.engines.areal.main --config RUN/areal/areal_config.yaml")


def read_rows(path: str | None) -> list[dict[str, Any]]:
    if not path or not Path(path).is_file():
        return []
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def trainer_settings(workflow: dict[str, Any]) -> dict[str, Any]:
    """The trainer's class attributes from workflow.yaml: the mismatch warning's tolerance, and
    whether it evaluates before and after training (held_out.py)."""
    held_out = workflow.get("held_out") or {}
    return {
        "mismatch_tolerance": workflow.get("mismatch_tolerance"),
        "eval_before": bool(held_out.get("before", False)),
        "eval_after": bool(held_out.get("after", False)),
    }


def trainer_class(workflow: dict[str, Any], folder: Path):
    """AReaL's PPOTrainer with the logprob mismatch each step (`actor.py`) and the held-out
    evaluations (`held_out.py`); on a CPU, the one that uses our policy server, started here."""
    settings = trainer_settings(workflow)
    if workflow.get("cpu_server"):
        from aworld_train.engines.areal.cpu.trainer import cpu_trainer

        return cpu_trainer(workflow["cpu_server"], folder, settings)
    from aworld_train.engines.areal.actor import measured_trainer

    return nullcontext(measured_trainer(settings))


def main(argv: list[str]) -> None:
    from areal.api.cli_args import GRPOConfig, load_expr_config

    folder = config_path(argv).resolve().parent
    workflow = yaml.safe_load((folder / "workflow.yaml").read_text())
    config, _ = load_expr_config(argv, GRPOConfig)
    # our rows go to AReaL's dataloader as they are: each one reaches arun_episode unchanged
    train_rows = read_rows(config.train_dataset.path)
    valid_rows = read_rows(config.valid_dataset.path if config.valid_dataset else None)
    kwargs = {**workflow["kwargs"], "gconfig": config.gconfig}
    # evaluation: the held-out samples of each task (k under each seed, the held-out rollout
    # settings: workflow.yaml's eval_kwargs), raw rewards
    eval_kwargs = {
        **kwargs,
        "gconfig": config.eval_gconfig,
        **workflow.get("eval_kwargs", {}),
        "group_baseline": False,
    }
    with (
        trainer_class(workflow, folder) as trainer_cls,
        trainer_cls(config, train_dataset=train_rows, valid_dataset=valid_rows or None) as trainer,
    ):
        trainer.train(
            workflow=workflow["workflow"],
            workflow_kwargs=kwargs,
            eval_workflow=workflow["workflow"],
            eval_workflow_kwargs=eval_kwargs,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
