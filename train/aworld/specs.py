"""Whatever a user names as the agent to train, as the spec the workers rebuild it from: an AWorld
Agent or swarm, an agent run in a process of its own (`ProcessAgent`, trained through the
gateway), a 'module:factory' returning one, an agent YAML, or a spec already made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from aworld_train.aworld.agent_spec import AgentSpec, spec_from_agent
from aworld_train.aworld.swarm_spec import SwarmSpec, is_swarm, spec_from_swarm
from aworld_train.core.errors import AgentSpecError, ConfigError
from aworld_train.core.references import import_object
from aworld_train.core.validation import explain_validation, read_yaml
from aworld_train.rollout.gateway.process_agent import ProcessAgent

Spec = AgentSpec | SwarmSpec | ProcessAgent


def load_agent_spec(agent: Any) -> Spec:
    """An Agent or swarm object, a spec, a 'module:factory' string or an agent YAML path -> spec."""
    if isinstance(agent, AgentSpec | SwarmSpec | ProcessAgent):
        return agent
    if isinstance(agent, str | Path) and str(agent).endswith((".yaml", ".yml")):
        return _read_spec(agent)
    if isinstance(agent, str):
        factory = import_object(agent, "agent factory")
        if not callable(factory):
            raise AgentSpecError(
                f"agent factory {agent!r} is a {type(factory).__name__}, not callable: name a function "
                "that returns an AWorld Agent or swarm, or a ProcessAgent"
            )
        try:
            built = factory()
        except Exception as exc:
            raise AgentSpecError(
                f"agent factory {agent!r} failed ({type(exc).__name__}: {exc}): fix it so that, called "
                "with no arguments, it returns an AWorld Agent or swarm"
            ) from exc
        return _spec_of(built, factory=agent)
    if agent is None:
        raise AgentSpecError(
            "agent is required: pass an AWorld Agent or swarm, 'module:factory' or an agent YAML path"
        )
    return _spec_of(agent)


def _spec_of(built: Any, factory: str | None = None) -> Spec:
    if isinstance(built, ProcessAgent):
        return built
    return spec_from_swarm(built, factory) if is_swarm(built) else spec_from_agent(built, factory)


def _read_spec(path: str | Path) -> Spec:
    """An agent YAML: one agent's spec, a swarm's (it has `agents:`) or a process agent's (`command:`)."""
    try:
        data = read_yaml(path, "agent YAML")
    except ConfigError as exc:
        raise AgentSpecError(str(exc)) from None
    keys = data if isinstance(data, dict) else {}
    model = SwarmSpec if "agents" in keys else ProcessAgent if "command" in keys else AgentSpec
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise AgentSpecError(
            f"agent YAML {str(path)!r}: " + explain_validation(exc, model, "agent")
        ) from None
