"""An AWorld Agent as a serialisable spec, and the Agent rebuilt from it in a worker: the AWorld
driver of the rollout core (`rollout/episodes/driver.py`), one `AWorldRun` per episode.

Secrets never reach disk (ARCHITECTURE.md invariant 4): a header value that contains the
value of an environment variable is written as a `${VAR}` reference, and a
secret-looking header with a literal value is refused. Workers resolve the
references at run time.
"""

from __future__ import annotations

import enum
import json
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import Field

from aworld_train.core.errors import AgentSpecError
from aworld_train.core.protocol import ENV_REF, EPISODE_HEADER, TASK_HEADER, TURN_HEADER, MissingVariable
from aworld_train.core.protocol import resolve_env_refs as _resolve
from aworld_train.core.validation import SpecFile
from aworld_train.rollout.episodes.driver import AgentRole

if TYPE_CHECKING:
    from aworld_train.rollout.episodes.driver import LLMEndpoint
    from aworld_train.rollout.episodes.trajectory import Task

_SECRET_HEADER = re.compile(r"auth|token|key|secret|password|cookie|invitation", re.IGNORECASE)
# llm fields that belong to the engine, not to the agent: the trainer sets them.
_ENGINE_LLM_FIELDS = {
    "llm_provider",
    "llm_model_name",
    "llm_base_url",
    "llm_api_key",
    "llm_client_type",
    "llm_response_parser",
    "llm_sync_enabled",
    "llm_async_enabled",
    "llm_stream_call",
}


class AWorldDriverSpec(SpecFile):
    """What an agent's and a swarm's specs share: each is the rollout core's AgentDriver, starting
    one `AWorldRun` an episode over what its `build_run` builds."""

    def start(
        self, endpoint: LLMEndpoint, episode_id: str, task: Task, max_assistant_turns: int
    ) -> AWorldRun:
        return AWorldRun(self, endpoint, episode_id, task, max_assistant_turns)


class AgentSpec(AWorldDriverSpec):
    name: str
    description: str = ""
    system_prompt: str = ""
    mcp_config: dict[str, Any] = Field(default_factory=dict)
    mcp_servers: list[str] = Field(default_factory=list)
    tool_names: list[str] = Field(default_factory=list)
    agent_config: dict[str, Any] = Field(default_factory=dict)
    few_shot: list[dict[str, Any]] = Field(
        default_factory=list, description="example chat turns placed after the system message of every prompt"
    )
    factory: str | None = Field(None, description="'module:factory' the spec came from, if any")

    def roles(self) -> list[AgentRole]:
        return [AgentRole(self.name, list(self.few_shot), list(self.mcp_servers))]

    def build_run(
        self, endpoint: LLMEndpoint, episode_id: str, task: Task, max_assistant_turns: int
    ) -> tuple[Callable[[], Any], list[Any], LLMEndpoint]:
        """What gives each user turn of one episode its AWorld swarm (this agent alone), its agents,
        and the endpoint their calls go to."""
        from aworld_train.aworld.framework import Swarm

        # a row's own system message is the episode's system prompt, as in verl's and AReaL's rows
        spec = self.model_copy(update={"system_prompt": task.system}) if task.system else self
        llm = episode_llm(spec, episode_id, max_assistant_turns)
        agent = build_agent(spec, llm=llm, episode_id=episode_id, task_id=task.id)
        return lambda: Swarm(agent), [agent], endpoint


# -- secrets --------------------------------------------------------------------
def _env_reference(value: str, env: dict[str, str]) -> str:
    """Replace the values of environment variables inside `value` by `${VAR}` references."""
    candidates = sorted(((k, v) for k, v in env.items() if len(v) >= 6), key=lambda kv: -len(kv[1]))
    for key, secret in candidates:
        if secret in value:
            value = value.replace(secret, "${" + key + "}")
    return value


def protect_secrets(mcp_config: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    env = dict(os.environ if env is None else env)
    out = json.loads(json.dumps(mcp_config))
    for server, conf in (out.get("mcpServers") or {}).items():
        headers = conf.get("headers") or {}
        for header, value in list(headers.items()):
            if not isinstance(value, str):
                continue
            value = _env_reference(value, env)
            headers[header] = value
            literal = ENV_REF.sub("", value).replace("Bearer", "").strip()
            if _SECRET_HEADER.search(header) and literal and not ENV_REF.search(value):
                raise AgentSpecError(
                    f"mcp_config.mcpServers.{server}.headers.{header} holds a literal secret; "
                    f"put it in an environment variable and write '${{VAR}}' (e.g. 'Bearer ${{MY_TOKEN}}')"
                )
        for key in ("env",):
            for name, value in list((conf.get(key) or {}).items()):
                if isinstance(value, str):
                    conf[key][name] = _env_reference(value, env)
    return out


def resolve_env_refs(obj: Any, env: dict[str, str] | None = None) -> Any:
    """`${VAR}` references replaced by their values at run time; a missing variable is an error."""
    try:
        return _resolve(obj, env)
    except MissingVariable as exc:
        raise AgentSpecError(
            f"environment variable {exc.name} is not set; the agent's mcp_config uses ${{{exc.name}}}"
        ) from None


# -- agent <-> spec --------------------------------------------------------------
def _jsonable(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            converted = _jsonable(v)
            if converted is not _DROP:
                out[str(k)] = converted
        return out
    if isinstance(value, list | tuple):
        return [v for v in (_jsonable(x) for x in value) if v is not _DROP]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return _DROP


_DROP = object()


def _agent_config_dict(conf: Any) -> dict[str, Any]:
    if conf is None:
        return {}
    data = dict(conf)
    llm = dict(data.pop("llm_config", None) or {})
    flat = {k: v for k, v in llm.items() if k not in _ENGINE_LLM_FIELDS}
    data = {k: v for k, v in data.items() if k not in ("system_prompt",)}
    result = _jsonable({**data, **flat})
    return {k: v for k, v in result.items() if v is not None}


def own_code_error(agent: Any, where: str) -> AgentSpecError:
    """What refuses an agent of a class of its own: its methods would be lost, since every worker
    rebuilds the agent from its spec as AWorld's plain Agent."""
    name = agent.name() if callable(getattr(agent, "name", None)) else getattr(agent, "name", agent)
    return AgentSpecError(
        f"{where}agent {name!r} is a {type(agent).__module__}.{type(agent).__name__}; the workers "
        "rebuild every agent as aworld.agents.llm_agent.Agent from its settings, so its own code "
        "would be lost: build it as an Agent (tools through MCP servers, behaviour through its "
        "system prompt), or run it in a process of its own (ProcessAgent)"
    )


def spec_from_agent(agent: Any, factory: str | None = None) -> AgentSpec:
    """The spec of a built AWorld Agent (its LLM provider is left to the trainer)."""
    from aworld_train.aworld.framework import Agent

    if isinstance(agent, Agent) and type(agent) is not Agent:
        raise own_code_error(agent, "")
    try:
        name = agent.name() if callable(getattr(agent, "name", None)) else agent.name
        desc = agent.desc() if callable(getattr(agent, "desc", None)) else getattr(agent, "desc", "")
    except Exception as exc:  # pragma: no cover - defensive
        raise AgentSpecError(
            f"agent: cannot read its name/description ({exc}); pass an AWorld Agent"
        ) from exc
    mcp_config = getattr(agent, "mcp_config", None) or {}
    if not isinstance(mcp_config, dict):
        raise AgentSpecError("agent.mcp_config must be a dict like {'mcpServers': {...}}")
    return AgentSpec(
        name=str(name),
        description=str(desc or ""),
        system_prompt=str(getattr(agent, "system_prompt", "") or ""),
        mcp_config=protect_secrets(mcp_config),
        mcp_servers=list(getattr(agent, "mcp_servers", None) or []),
        tool_names=list(getattr(agent, "tool_names", None) or []),
        agent_config=_agent_config_dict(getattr(agent, "conf", None)),
        few_shot=list(getattr(agent, "few_shot", None) or []),
        factory=factory,
    )


def build_agent(
    spec: AgentSpec,
    llm: dict[str, Any] | None = None,
    episode_id: str | None = None,
    task_id: str | None = None,
    env: dict[str, str] | None = None,
    agent_id: str | None = None,
):
    """An AWorld Agent equivalent to the one `spec` came from.

    `llm` sets the engine fields (provider, base_url, model name); `episode_id` goes
    into every MCP server's headers so stateful servers can isolate episodes, with
    `task_id` and the user turn (0; see `aworld_runtime.set_turn`) beside it. `env`
    resolves the spec's `${VAR}` references instead of the process environment. `agent_id` replaces
    AWorld's random id (a swarm's agents are each other's tools under their ids).
    """
    from aworld_train.aworld import install
    from aworld_train.aworld.framework import Agent, AgentConfig

    install()  # before any agent exists: AWorld components take the memory store when they are built
    mcp_config = resolve_env_refs(spec.mcp_config, env)
    if episode_id is not None:
        for conf in (mcp_config.get("mcpServers") or {}).values():
            headers = conf.setdefault("headers", {})
            headers[EPISODE_HEADER] = episode_id
            if task_id is not None:
                headers[TASK_HEADER] = task_id
                headers[TURN_HEADER] = "0"
    conf_kwargs = dict(spec.agent_config)
    conf_kwargs.update(llm or {})
    try:
        conf = AgentConfig(**conf_kwargs)
        return Agent(
            name=spec.name,
            desc=spec.description,
            system_prompt=spec.system_prompt,
            mcp_config=mcp_config,
            mcp_servers=list(spec.mcp_servers),
            tool_names=list(spec.tool_names) or None,
            conf=conf,
            agent_id=agent_id,
        )
    except Exception as exc:
        raise AgentSpecError(f"agent {spec.name!r} cannot be rebuilt from its spec: {exc}") from exc


def episode_llm(
    spec: AgentSpec, episode_id: str, max_assistant_turns: int, agent: str = ""
) -> dict[str, Any]:
    """The engine's LLM fields of one agent in one episode: its calls go to our provider, which
    hands them to the episode (`agent` names it among a team's agents)."""
    from aworld_train.aworld import provider

    # later user turns must see the earlier ones: AWorld keys history by task otherwise
    memory = {**spec.agent_config.get("memory_config", {}), "history_scope": "session"}
    if memory.get("enable_summary"):
        # the write that runs a due summary (history.EpisodeMemory) is awaited in the agent's own
        # task before its next call is built; an event-driven write stops waiting after 30 s
        memory["history_write_strategy"] = "direct"
    return {
        "llm_provider": provider.PROVIDER_NAMES[0],
        "llm_base_url": provider.episode_url(episode_id, agent),
        "llm_model_name": "aworld-train-policy",
        "llm_api_key": "not-used",
        "max_steps": max_assistant_turns + 2,
        "memory_config": memory,
    }


class AWorldRun:
    """One episode's AWorld agent, or swarm, rebuilt from its spec (`spec.build_run`), whose LLM
    calls our provider routes to the episode (`provider.py`): `turn` runs a user turn, `release`
    forgets the episode."""

    def __init__(
        self, spec: Any, endpoint: LLMEndpoint, episode_id: str, task: Task, max_assistant_turns: int
    ) -> None:
        from aworld_train.aworld import install, provider

        install()
        self.episode_id = episode_id
        self.swarm_for_turn, self.agents, endpoint = spec.build_run(
            endpoint, episode_id, task, max_assistant_turns
        )
        provider.attach(episode_id, endpoint)

    async def turn(self, user_turn: int, text: str) -> str | None:
        from aworld_train.aworld.framework import run_turn, set_turn

        for agent in self.agents:
            set_turn(agent, user_turn)
        response = await run_turn(self.swarm_for_turn(), self.agents, text, self.episode_id)
        if response is not None and not getattr(response, "success", True):
            return f"AWorld ended the turn without success: {getattr(response, 'msg', '')}"
        return None

    async def release(self) -> None:
        from aworld_train.aworld import provider
        from aworld_train.aworld.framework import release_episode

        provider.detach(self.episode_id)
        await release_episode(self.agents, self.episode_id)
