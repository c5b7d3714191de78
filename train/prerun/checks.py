"""`aworld-train check CONFIG`: everything a run needs, checked before a model loads or a GPU is claimed.

The same checks run at the start of `run` for the engine backends: a verl or AReaL launch
that would fail on a GPU node fails here instead, with the field and the fix.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aworld_train.inputs.run import RenderedRun, RunInputs


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str = ""

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}" + (f": {self.detail}" if self.detail else "")


def run_folder_writable(run_dir: Path) -> Check:
    name = "run folder writable"
    if run_dir.exists() and not run_dir.is_dir():
        return Check(name, False, f"trainer.run_dir={str(run_dir)!r} is a file: choose a folder")
    probe_root = run_dir if run_dir.exists() else next(p for p in run_dir.parents if p.exists())
    try:
        with tempfile.NamedTemporaryFile(dir=probe_root):
            pass
    except OSError as exc:
        return Check(
            name, False, f"trainer.run_dir={str(run_dir)!r}: {exc.strerror}: choose a writable folder"
        )
    return Check(name, True, str(run_dir))


def mcp_servers_answer(inputs: RunInputs, timeout_s: float = 10.0, start_servers: bool = True) -> list[Check]:
    """List each of the agent's HTTP servers' tools, with the config's `env:` servers started
    here unless the caller already runs them."""
    from aworld_train.aworld.agent_spec import resolve_env_refs
    from aworld_train.core.errors import AgentSpecError
    from aworld_train.prerun.mcp import ask_server
    from aworld_train.prerun.servers import running_envs

    checks = []
    with running_envs(inputs.config.env, None) if start_servers else contextlib.nullcontext():
        for name, conf in (inputs.spec.mcp_config.get("mcpServers") or {}).items():
            if not isinstance(conf, dict) or not conf.get("url"):
                continue
            label = f"MCP server {name!r}"
            try:
                resolved = resolve_env_refs(conf)
            except AgentSpecError as exc:
                checks.append(Check(label, False, str(exc)))
                continue
            answer = ask_server(name, resolved, timeout_s)
            if answer.problem is not None:
                checks.append(Check(label, False, f"{answer.url} {answer.problem}: {answer.fix()}"))
            else:
                checks.append(Check(label, True, f"{answer.url}: {len(answer.tools)} tools"))
    return checks


def chat_template(inputs: RunInputs) -> Check:
    """The model's template family, tool-call parser and stop ids; a template whose calls no
    parser reads, or that drops tool results, fails."""
    from aworld_train.core.errors import AworldTrainError
    from aworld_train.rollout.episodes.template_check import refusal, template_report
    from aworld_train.rollout.policies.models import load_tokenizer

    name = "chat template"
    try:
        report = template_report(load_tokenizer(inputs.config.model), inputs.config.rollout)
    except (AworldTrainError, OSError, ValueError) as exc:
        return Check(name, False, f"model {inputs.config.model!r}: {exc}")
    why = refusal(report)
    if why:
        return Check(name, False, f"{report.line()}: {why}")
    return Check(name, True, report.line())


def sampler(inputs: RunInputs) -> Check:
    """What samples the rollouts of an engine that offers the choice (local; verl's `aworld_cpu`
    rollout): the trainer's own model, or vLLM's server (whose environment must be there)."""
    from aworld_train.rollout.policies.vllm_server import vllm_missing, vllm_python

    rollout = inputs.config.rollout
    if rollout.engine != "vllm":
        return Check("sampler", True, "transformers: the trainer's own model samples (with transformers)")
    missing = vllm_missing()
    if missing:
        return Check("sampler", False, f"rollout.engine=vllm: {missing}")
    return Check(
        "sampler", True, f"vLLM's server from {vllm_python()}, the weights pushed after every update"
    )


def run_checks(inputs: RunInputs, engine, run: RenderedRun | None = None) -> list[Check]:
    """Every check; given `run` (the render about to launch), its env servers are running already."""
    checks = [
        run_folder_writable(inputs.run_dir),
        chat_template(inputs),
        *([sampler(inputs)] if engine.capabilities.vllm_sampler else []),
        *mcp_servers_answer(inputs, start_servers=run is None),
    ]
    checks.extend(engine.checks(inputs, run))
    return checks


def require_checks(inputs: RunInputs, engine, run: RenderedRun) -> None:
    """`run`'s preflight for the engine backends, on the rendered run about to launch (its env
    servers running): every failed check in one error."""
    from aworld_train.core.errors import ConfigError

    failed = [c for c in run_checks(inputs, engine, run) if not c.ok]
    if failed:
        raise ConfigError("the run cannot start:\n" + "\n".join(c.line() for c in failed))
