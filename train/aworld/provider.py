"""The AWorld LLM provider that routes each agent call to its episode.

Each episode rebuilds its agent with `llm_base_url = aworld-train://<episode id>`;
the provider looks the episode up by that id, so concurrent episodes never share
a ledger, whatever tasks or threads AWorld runs them on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aworld_train.aworld.runtime import (
    Function,
    LLMProviderBase,
    ModelResponse,
    ToolCall,
    register_llm_provider,
    sanitize_openai_messages,
)

if TYPE_CHECKING:
    from aworld_train.rollout.driver import LLMEndpoint, Reply

SCHEME = "aworld-train://"
PROVIDER_NAMES = ("aworld_train", "verl")


_ACTIVE: dict[str, LLMEndpoint] = {}


def episode_url(episode_id: str) -> str:
    return SCHEME + episode_id


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

    def _endpoint(self) -> LLMEndpoint:
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
        reply = await self._endpoint().complete(sanitize_openai_messages(messages), kwargs.get("tools"))
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
