"""What the engine backends (verl, AReaL) share: reading and filling a native config
section by the precedence rules, and launching the engine with its log streamed.

The rules: a value the user gave wins; an absent, empty or `auto` value is filled
from the common config; a user value that contradicts a common field the user
set is an error naming both.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aworld_train.errors import ConfigError

if TYPE_CHECKING:
    from aworld_train.trainer import AgentTrainer

BLANK = (None, "", "auto", "???")


def get(tree: dict[str, Any], dotted: str) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def put(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def blank(value: Any) -> bool:
    return value in BLANK or value == [] or value == {}


@dataclass
class Derived:
    """One value we fill in an engine's config, and the common-config field it comes from (if any)."""

    key: str
    value: Any
    common: str | None = None  # e.g. "algorithm.group_size"; set => contradictions are errors


def module_file(module_or_path: str) -> str:
    if module_or_path.endswith(".py"):
        return str(Path(module_or_path).resolve())
    return str(Path(importlib.import_module(module_or_path).__file__).resolve())


def explicit(trainer: AgentTrainer, common: str) -> bool:
    """Did the user set this common-config field (rather than leave the default)?"""
    section, _, field = common.partition(".")
    cfg = trainer.config
    if not field:
        return section in cfg.model_fields_set
    if section == "data" and field in ("train", "test"):
        return bool(trainer.train_tasks if field == "train" else trainer.test_tasks)
    if common == "reward.fn":
        return True  # the trainer always runs one reward function: the engine's must be the same
    node = getattr(cfg, section)
    return section in cfg.model_fields_set and field in node.model_fields_set


def same_value(given: Any, derived: Any) -> bool:
    try:
        return float(given) == float(derived)
    except (TypeError, ValueError):
        return given == derived


def fill(
    native: dict[str, Any],
    derived: list[Derived],
    trainer: AgentTrainer,
    section: str,
    same=lambda given, value, key: same_value(given, value),
) -> dict[str, Any]:
    """A copy of `native` with every blank filled from `derived`; contradictions raise ConfigError."""
    out = json.loads(json.dumps(native))
    for item in derived:
        given = get(out, item.key)
        if blank(given):
            put(out, item.key, item.value)
        elif item.common and explicit(trainer, item.common) and not same(given, item.value, item.key):
            raise ConfigError(
                f"{section}.{item.key}={given!r} contradicts {item.common} (which gives {item.value!r}); "
                f"set one of them, or make them agree"
            )
    return out


def launch(command: list[str], trainer: AgentTrainer, log_name: str) -> tuple[int, Path]:
    """Run the engine's entry point beside the configured MCP servers, its output streamed
    to stderr and appended to `<run_dir>/<log_name>`."""
    from aworld_train.runtime import running_envs

    log_path = Path(trainer.config.trainer.run_dir) / log_name
    print(f"launching: {' '.join(command)}\nlog: {log_path}", file=sys.stderr)
    # the engine's workers inherit the servers' <NAME>_MCP_URL
    with running_envs(trainer.config.env, trainer.config.trainer.run_dir), log_path.open("a") as log:
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
            for line in proc.stdout:
                sys.stderr.write(line)
                log.write(line)
            returncode = proc.wait()
    return returncode, log_path


def launch_run(
    backend: str, command: list[str], folder: Path, trainer: AgentTrainer, resume_override: str, resume: bool
) -> dict[str, Any]:
    """Launch a rendered run (with the engine's own resume override when resuming); its summary."""
    returncode, log_path = launch(
        [*command, resume_override] if resume else command, trainer, f"{backend}.log"
    )
    return {"backend": backend, "returncode": returncode, "run_dir": str(folder), "log": str(log_path)}
