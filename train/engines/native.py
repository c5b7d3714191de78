"""What the engine backends (verl, AReaL) share: reading and filling a native config
section by the precedence rules, and launching the engine with its log streamed.

The rules: a value the user gave wins; an absent, empty or `auto` value is filled
from the common config; a user value that contradicts a common field the user
set is an error naming both.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aworld_train.core.errors import ConfigError, EngineFailed

if TYPE_CHECKING:
    from aworld_train.engines.protocol import Engine
    from aworld_train.env.supervisor import ServerSupervisor
    from aworld_train.inputs.run import RenderedRun, RunInputs

BLANK = (None, "", "auto", "???")
# lines of a failed engine's log that its error shows
LOG_TAIL_LINES = 30


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


def same_value(given: Any, derived: Any) -> bool:
    try:
        return float(given) == float(derived)
    except (TypeError, ValueError):
        return given == derived


def fill(
    native: dict[str, Any],
    derived: list[Derived],
    inputs: RunInputs,
    section: str,
    *,
    same=lambda given, value, key: same_value(given, value),
) -> dict[str, Any]:
    """A copy of `native` with every blank filled from `derived`; contradictions raise ConfigError."""
    out = json.loads(json.dumps(native))
    for item in derived:
        given = get(out, item.key)
        if blank(given):
            put(out, item.key, item.value)
        elif item.common and inputs.explicit(item.common) and not same(given, item.value, item.key):
            raise ConfigError(
                f"{section}.{item.key}={given!r} contradicts {item.common} (which gives {item.value!r}); "
                f"set one of them, or make them agree"
            )
    return out


def lora_dropout_limit(cfg: Any, actor: str) -> list[str]:
    """verl's and AReaL's actors build their adapters without dropout: `algorithm.lora.dropout`
    refused, naming the engine's actor (`actor`: what it is, and its section without the key)."""
    lora = cfg.algorithm.lora
    if lora is None or not lora.dropout:
        return []
    return [
        f"algorithm.lora.dropout={lora.dropout:g}: {actor} builds its adapter without dropout; set it to 0"
    ]


def launch(
    command: list[str],
    inputs: RunInputs,
    log_name: str,
    env: dict[str, str] | None = None,
    servers: ServerSupervisor | None = None,
    watch: Callable[[str], str | None] | None = None,
) -> tuple[int, Path]:
    """Run the engine's entry point, its output streamed to stderr and appended to
    `<run_dir>/<log_name>`; `env` is added to the environment. An `env:` server that `servers`
    gives up ends the engine (its episodes could reach the tools no more). `watch` reads each line;
    a line it returns follows that one, in both."""
    log_path = inputs.run_dir / log_name
    prefix = " ".join(f"{key}={value}" for key, value in (env or {}).items())
    print(f"launching: {prefix + ' ' if prefix else ''}{' '.join(command)}\nlog: {log_path}", file=sys.stderr)
    with log_path.open("a") as log:
        full_env = {**os.environ, **(env or {})}
        with subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env
        ) as proc:
            if servers is not None:
                servers.on_give_up(lambda _: proc.terminate())
            for line in proc.stdout:
                added = watch(line) if watch is not None else None
                for text in (line, f"{added}\n" if added else ""):
                    sys.stderr.write(text)
                    log.write(text)
            returncode = proc.wait()
    return returncode, log_path


def launch_run(
    engine: Engine,
    inputs: RunInputs,
    resume_overrides: list[str],
    resume: bool,
    *,
    refuse: Callable[[RenderedRun], None] | None = None,
    watch: Callable[[str], str | None] | None = None,
) -> dict[str, Any]:
    """Start the config's MCP servers, render the run folder, make `run`'s checks against those
    servers and that render (before a GPU node is claimed), then launch the engine, with its own
    resume overrides when resuming; its summary. `refuse` may reject the rendered run first;
    `watch` reads the engine's output (see `launch`).

    The servers start and the config renders once: the checks see what the engine will run with."""
    from aworld_train.prerun.checks import require_checks
    from aworld_train.prerun.servers import running_envs

    # the engine's workers inherit the servers' <NAME>_MCP_URL (running_envs sets them in os.environ);
    # on a Ray cluster the render forwards them, and other nodes start their own (engines/node_servers.py)
    with running_envs(inputs.config.env, inputs.run_dir) as servers:
        run = engine.render(inputs)
        if refuse is not None:
            refuse(run)
        require_checks(inputs, engine, run)
        command = list(run.command) + (resume_overrides if resume else [])
        returncode, log_path = launch(command, inputs, f"{run.engine}.log", run.env, servers, watch)
    servers.check(wait=False)  # a server given up ended the engine: that is the cause to report
    if returncode != 0:
        raise EngineFailed(engine_failure(run.engine, returncode, log_path))
    return {"backend": run.engine, "returncode": returncode, "run_dir": str(run.folder), "log": str(log_path)}


def engine_failure(engine: str, returncode: int, log_path: Path) -> str:
    """What a failed launch reports: the exit status, the log's last lines and its path."""
    lines = log_path.read_text(errors="replace").splitlines() if log_path.is_file() else []
    tail = "\n".join(f"  | {line}" for line in lines[-LOG_TAIL_LINES:])
    return f"{engine} exited with status {returncode}: the run failed. Its log is {log_path}" + (
        f", which ends:\n{tail}" if tail else " (empty)"
    )


def unknown_key_message(base: Any, exc: Exception, section: str, what: str) -> str:
    """`<section>.<key> is not a key of <what> (did you mean ...?): ...`, from OmegaConf's error."""
    import difflib

    from omegaconf import OmegaConf

    dotted = str(getattr(exc, "full_key", "") or getattr(exc, "key", ""))
    parent, _, leaf = dotted.rpartition(".")
    node = OmegaConf.select(base, parent) if parent else base
    keys = [str(k) for k in node.keys()] if hasattr(node, "keys") else []
    close = difflib.get_close_matches(leaf, keys, n=1)
    hint = f" (did you mean {section}.{parent + '.' if parent else ''}{close[0]}?)" if close else ""
    return f"{section}.{dotted} is not a key of {what}{hint}: remove it or fix its spelling"
