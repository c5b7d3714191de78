"""An AWorld swarm (a team of agents) as a serialisable spec, rebuilt in each worker: the driver of
a multi-agent episode.

A swarm's spec is its agents' specs (each an `AgentSpec`, secrets as `${VAR}` references), its kind
(workflow, team, handoff, hybrid: AWorld's own `*Swarm` classes) and its topology by agent name.
Every agent of an episode's swarm sends its LLM calls to `aworld-train://<episode>/<agent>`, so the
episode keeps one token ledger per agent. What cannot be rebuilt from such a spec (a nested swarm,
an agent class of its own, two agents of one name) is refused when the spec is made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from aworld_train.aworld.agent_spec import (
    AgentSpec,
    AWorldDriverSpec,
    build_agent,
    episode_llm,
    own_code_error,
    spec_from_agent,
)
from aworld_train.core.errors import AgentSpecError
from aworld_train.rollout.episodes.driver import AgentRole, CallOptions

if TYPE_CHECKING:
    from aworld_train.rollout.episodes.driver import LLMEndpoint, Reply
    from aworld_train.rollout.episodes.trajectory import Task

SwarmKind = Literal["workflow", "team", "handoff", "hybrid"]
# a topology entry: an agent's name, or AWorld's tuple (a pair: the right one is the left's tool or
# successor) or list (agents run side by side), by name
TopologyItem = str | dict[str, list[str]]


class SwarmSpec(AWorldDriverSpec):
    name: str
    kind: SwarmKind
    agents: list[AgentSpec] = Field(min_length=1)
    topology: list[TopologyItem] = Field(min_length=1)
    root: str | None = Field(
        None, description="the agent that talks to the user; AWorld's default: the first"
    )
    max_steps: int = 0
    min_call_num: int = 0
    factory: str | None = Field(None, description="'module:factory' the spec came from, if any")

    @model_validator(mode="after")
    def _names_resolve(self) -> SwarmSpec:
        for item in self.topology:
            if isinstance(item, dict) and (len(item) != 1 or next(iter(item)) not in ("pair", "group")):
                raise ValueError(
                    f"topology entry {item!r}: write an agent's name, {{pair: [a, b]}} or {{group: [a, b]}}"
                )
        names = [agent.name for agent in self.agents]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(
                f"agent names must be unique in a swarm; {', '.join(twice)} appear twice: give each agent "
                "a name of its own"
            )
        servers: dict[str, Any] = {}
        for agent in self.agents:
            for server, conf in (agent.mcp_config.get("mcpServers") or {}).items():
                if servers.setdefault(server, conf) != conf:
                    raise ValueError(
                        f"two agents name MCP server {server!r} with different settings; give one of them "
                        "another name (the episode reaches every server by its name)"
                    )
        used = [*_names(self.topology), *([self.root] if self.root else [])]
        unknown = sorted(set(used) - set(names))
        if unknown:
            raise ValueError(
                f"topology names {', '.join(unknown)}, not among the agents {', '.join(names)}: name agents "
                "listed under agents:"
            )
        return self

    # -- what the rollout core reads (AgentDriver) ------------------------------------------
    @property
    def mcp_config(self) -> dict[str, Any]:
        servers: dict[str, Any] = {}
        for agent in self.agents:
            servers.update(agent.mcp_config.get("mcpServers") or {})
        return {"mcpServers": servers}

    @property
    def mcp_servers(self) -> list[str]:
        return list(dict.fromkeys(name for agent in self.agents for name in agent.mcp_servers))

    @property
    def few_shot(self) -> list[dict[str, Any]]:
        return self.first.few_shot

    @property
    def system_prompt(self) -> str:
        return self.first.system_prompt

    @property
    def first(self) -> AgentSpec:
        """The agent a task's first message goes to."""
        name = self.root or _names(self.topology[:1])[0]
        return next(agent for agent in self.agents if agent.name == name)

    def roles(self) -> list[AgentRole]:
        ordered = [self.first, *(agent for agent in self.agents if agent is not self.first)]
        return [AgentRole(a.name, list(a.few_shot), list(a.mcp_servers)) for a in ordered]

    def build_run(
        self, endpoint: LLMEndpoint, episode_id: str, task: Task, max_assistant_turns: int
    ) -> tuple[Callable[[], Any], list[Any], LLMEndpoint]:
        """The swarm of one episode, every agent's calls to its own ledger, its agents, and the
        endpoint their calls go to (agents named by name, not id). AWorld builds a swarm's graph
        once, on its first task (its builder appends handoffs again on a rebuild), so every user
        turn runs the same swarm."""
        spec = self
        if task.system:  # a row's own system message is its first agent's system prompt
            first = self.first.model_copy(update={"system_prompt": task.system})
            spec = self.model_copy(update={"agents": [first if a is self.first else a for a in self.agents]})
        by_name = {agent.name: agent for agent in spec.agents}
        swarm, agents = build_swarm(
            spec,
            lambda name: episode_llm(by_name[name], episode_id, max_assistant_turns, agent=name),
            episode_id=episode_id,
            task_id=task.id,
        )
        ids = {agent.id(): name for name, agent in agents.items()}
        return lambda: swarm, list(agents.values()), AgentsByName(endpoint, ids)


def _names(topology: list[TopologyItem]) -> list[str]:
    out: list[str] = []
    for item in topology:
        out.extend([item] if isinstance(item, str) else next(iter(item.values())))
    return out


# -- swarm -> spec ----------------------------------------------------------------------------
def is_swarm(obj: Any) -> bool:
    from aworld_train.aworld.framework import Swarm

    return isinstance(obj, Swarm)


def spec_from_swarm(swarm: Any, factory: str | None = None) -> SwarmSpec:
    """The spec of a built AWorld swarm; refuses what a worker could not rebuild, with the reason."""
    from aworld_train.aworld.framework import Agent, Swarm

    kind = str(getattr(swarm, "build_type", ""))
    if kind not in ("workflow", "team", "handoff", "hybrid"):
        raise AgentSpecError(
            f"swarm {swarm.name()!r}: build type {kind!r} cannot be trained; use one of "
            "WorkflowSwarm, TeamSwarm, HandoffSwarm or HybridSwarm"
        )
    agents: dict[str, Any] = {}

    def name_of(agent: Any) -> str:
        if isinstance(agent, Swarm):
            raise AgentSpecError(
                f"swarm {swarm.name()!r} holds the swarm {agent.name()!r}: a nested swarm cannot be "
                "rebuilt in the training workers; list its agents in the outer swarm instead"
            )
        if type(agent) is not Agent:
            raise own_code_error(agent, f"swarm {swarm.name()!r}: ")
        name = agent.name()
        if name in agents and agents[name] is not agent:
            raise AgentSpecError(
                f"swarm {swarm.name()!r} holds two different agents named {name!r}: give each a name of its own"
            )
        agents[name] = agent
        return name

    topology: list[TopologyItem] = []
    for item in swarm.topology:
        if isinstance(item, tuple):
            topology.append({"pair": [name_of(a) for a in item]})
        elif isinstance(item, list):
            topology.append({"group": [name_of(a) for a in item]})
        else:
            topology.append(name_of(item))
    root = getattr(swarm.builder, "root_agent", None)
    if isinstance(root, list):
        raise AgentSpecError(f"swarm {swarm.name()!r}: a list of root agents cannot be trained; name one")
    try:
        return SwarmSpec(
            name=swarm.name(),
            kind=kind,
            agents=[spec_from_agent(agent) for agent in agents.values()],
            topology=topology,
            root=name_of(root) if root is not None else None,
            max_steps=int(getattr(swarm, "max_steps", 0) or 0),
            min_call_num=int(getattr(swarm, "min_call_num", 0) or 0),
            factory=factory,
        )
    except ValueError as exc:
        raise AgentSpecError(f"swarm {swarm.name()!r}: {exc}") from None


# -- spec -> swarm, in a worker ---------------------------------------------------------------
def build_swarm(
    spec: SwarmSpec,
    llm_for: Callable[[str], dict[str, Any]],
    episode_id: str | None = None,
    task_id: str | None = None,
    *,
    env: dict[str, str] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """The AWorld swarm `spec` came from, and its agents by name. `llm_for(name)` gives each agent's
    engine LLM fields (its provider URL); `env` resolves `${VAR}` references (`build_agent`)."""
    from aworld_train.aworld.framework import SWARM_CLASSES

    # AWorld finds an agent by its id in one process-wide registry: concurrent episodes' agents
    # need ids of their own (AgentsByName shows the policy the names instead)
    agents = {
        agent.name: build_agent(
            agent,
            llm=llm_for(agent.name),
            episode_id=episode_id,
            task_id=task_id,
            env=env,
            agent_id=f"{agent.name}---uuid{episode_id}uuid" if episode_id else None,
        )
        for agent in spec.agents
    }
    topology: list[Any] = []
    for item in spec.topology:
        if isinstance(item, str):
            topology.append(agents[item])
        elif "pair" in item:
            topology.append(tuple(agents[name] for name in item["pair"]))
        else:
            topology.append([agents[name] for name in item["group"]])
    try:
        swarm = SWARM_CLASSES[spec.kind](
            *topology,
            root_agent=agents[spec.root] if spec.root else None,
            max_steps=spec.max_steps,
            min_call_num=spec.min_call_num,
            name=spec.name,
        )
    except Exception as exc:
        raise AgentSpecError(f"swarm {spec.name!r} cannot be rebuilt from its spec: {exc}") from exc
    return swarm, agents


class AgentsByName:
    """An episode's endpoint, as a swarm's agents call it: an agent is another's tool (team, handoff)
    under its AWorld id, which is unique to the episode; the policy sees and calls it by its name,
    the same in every episode, and AWorld gets the id back."""

    def __init__(self, endpoint: LLMEndpoint, ids: dict[str, str]) -> None:
        self.endpoint = endpoint
        self.names = ids
        self.ids = {name: agent_id for agent_id, name in ids.items()}

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        agent: str = "",
        options: CallOptions | None = None,
    ) -> Reply:
        messages = [_renamed_calls(m, self.names) for m in messages]
        tools = [_renamed_call(t, self.names) for t in tools] if tools else tools  # same shape as a call
        reply = await self.endpoint.complete(messages, tools, agent, options)
        for choice in (reply, *reply.others):
            choice.tool_calls = [_renamed_call(c, self.ids) for c in choice.tool_calls]
        return reply


def _renamed_call(call: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    function = call.get("function") or {}
    if function.get("name") not in names:
        return call
    return {**call, "function": {**function, "name": names[function["name"]]}}


def _renamed_calls(message: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    if not message.get("tool_calls"):
        return message
    return {**message, "tool_calls": [_renamed_call(c, names) for c in message["tool_calls"]]}
