"""The AWorld LLM provider that routes each agent call to its episode.

Each episode rebuilds its agent with `llm_base_url = aworld-train://<episode id>`;
the provider looks the episode up by that id, so concurrent episodes never share
a ledger, whatever tasks or threads AWorld runs them on.
"""

from __future__ import annotations

from typing import Any, Protocol

from aworld_train.aworld.runtime import (
    LLMProviderBase,
    ModelResponse,
    register_llm_provider,
    sanitize_openai_messages,
)

SCHEME = "aworld-train://"
PROVIDER_NAMES = ("aworld_train", "verl")


class EpisodeEndpoint(Protocol):
    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> ModelResponse: ...


_ACTIVE: dict[str, EpisodeEndpoint] = {}


def episode_url(episode_id: str) -> str:
    return SCHEME + episode_id


def attach(episode_id: str, endpoint: EpisodeEndpoint) -> None:
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

    def _endpoint(self) -> EpisodeEndpoint:
        url = self.base_url or ""
        if not url.startswith(SCHEME):
            raise RuntimeError(
                f"llm_provider '{PROVIDER_NAMES[0]}' serves agents run by aworld-train episodes; "
                f"this agent's llm_base_url is {url!r}. Run it through AgentTrainer or `aworld-train eval`."
            )
        endpoint = _ACTIVE.get(url[len(SCHEME) :])
        if endpoint is None:
            raise RuntimeError(f"no running episode for {url!r}: the episode already ended")
        return endpoint

    async def acompletion(
        self, messages, temperature=0.0, max_tokens=None, stop=None, context=None, **kwargs
    ):
        # AWorld's serialiser turns every None after the first into the string 'None';
        # its own sanitiser restores the OpenAI message shape.
        return await self._endpoint().complete(sanitize_openai_messages(messages), kwargs.get("tools"))

    def completion(self, messages, temperature=0.0, max_tokens=None, stop=None, context=None, **kwargs):
        raise RuntimeError("aworld-train's provider is async; AWorld agents call it through acompletion")


def register() -> None:
    for name in PROVIDER_NAMES:
        register_llm_provider(name, AworldTrainProvider)
