"""The AWorld LLM provider that routes each agent call to its episode.

Each episode rebuilds its agent with `llm_base_url = aworld-train://<episode id>` (each agent
of a team with `aworld-train://<episode id>/<agent name>`); the provider looks the episode up by
that id and names the calling agent, so concurrent episodes, and the agents of one team, never
share a ledger, whatever tasks or threads AWorld runs them on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from aworld_train.aworld.framework import (
    Function,
    LLMProviderBase,
    ModelResponse,
    ToolCall,
    register_llm_provider,
    sanitize_openai_messages,
)
from aworld_train.rollout.episodes.driver import CallOptions

if TYPE_CHECKING:
    from aworld_train.rollout.episodes.driver import LLMEndpoint, Reply

SCHEME = "aworld-train://"
PROVIDER_NAMES = ("aworld_train", "verl")


_ACTIVE: dict[str, LLMEndpoint] = {}


def episode_url(episode_id: str, agent: str = "") -> str:
    """The base URL of one agent's LLM in one episode: `aworld-train://<episode>[/<agent>]`."""
    return SCHEME + episode_id + (f"/{quote(agent, safe='')}" if agent else "")


def _parse(url: str) -> tuple[str, str]:
    episode_id, _, agent = url[len(SCHEME) :].partition("/")
    return episode_id, unquote(agent)


def attach(episode_id: str, endpoint: LLMEndpoint) -> None:
    if episode_id in _ACTIVE:
        raise RuntimeError(f"episode id {episode_id!r} is already running")
    _ACTIVE[episode_id] = endpoint


def detach(episode_id: str) -> None:
    _ACTIVE.pop(episode_id, None)


def active_episodes() -> int:
    return len(_ACTIVE)


class AworldTrainProvider(LLMProviderBase):
    """Async only: AWorld's runners call `acompletion`."""

    def _init_provider(self):
        return self

    def _init_async_provider(self):
        return self

    def postprocess_response(self, response: Any) -> ModelResponse:
        return response

    def _endpoint(self) -> tuple[LLMEndpoint, str]:
        """The episode this agent's calls go to, and the agent's name in it ("" for a lone agent)."""
        url = self.base_url or ""
        if not url.startswith(SCHEME):
            raise RuntimeError(
                f"llm_provider '{PROVIDER_NAMES[0]}' serves agents run by aworld-train episodes; "
                f"this agent's llm_base_url is {url!r}. Run it through AgentTrainer or `aworld-train eval`."
            )
        episode_id, agent = _parse(url)
        endpoint = _ACTIVE.get(episode_id)
        if endpoint is None:
            raise RuntimeError(f"no running episode for {url!r}: the episode already ended")
        return endpoint, agent

    async def acompletion(
        self, messages, temperature=0.0, max_tokens=None, stop=None, context=None, **kwargs
    ):
        # AWorld's serialiser turns every None after the first into the string 'None';
        # its own sanitiser restores the OpenAI message shape.
        # the same call the gateway makes for an agent in another process (rollout/gateway/server.py)
        endpoint, agent = self._endpoint()
        stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
        options = CallOptions(max_tokens=max_tokens, stop=stops)
        reply = await endpoint.complete(
            sanitize_openai_messages(messages), kwargs.get("tools"), agent, options
        )
        return model_response(reply)

    def completion(self, messages, temperature=0.0, max_tokens=None, stop=None, context=None, **kwargs):
        raise RuntimeError("aworld-train's provider is async; AWorld agents call it through acompletion")


def model_response(reply: Reply) -> ModelResponse:
    """An episode's reply as the ModelResponse AWorld's agent reads."""
    calls = [
        ToolCall(
            id=c["id"], function=Function(name=c["function"]["name"], arguments=c["function"]["arguments"])
        )
        for c in reply.tool_calls
    ]
    return ModelResponse(
        id=reply.id,
        model="aworld-train-policy",
        content=reply.content,
        tool_calls=calls or None,
        finish_reason=reply.finish_reason,
        usage=reply.usage,
    )


def register() -> None:
    for name in PROVIDER_NAMES:
        register_llm_provider(name, AworldTrainProvider)
