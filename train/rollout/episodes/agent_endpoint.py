"""An agent of a team served by another OpenAI-compatible chat endpoint (`rollout.agent_endpoints`):
a frozen helper, a larger model as the planner, a hosted model as a judge. Its calls skip the
policy and the ledger: the endpoint gets the agent's messages and tools as they are and answers
with text and tool calls; nothing it says is trained on."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from aworld_train.core.protocol import ENV_REF, resolve_env_refs
from aworld_train.core.validation import http_url_problem
from aworld_train.rollout.episodes.driver import Reply

_NO_KEY = {"", "not-used", "EMPTY"}  # what servers without keys take


class AgentEndpoint(BaseModel):
    """One entry of `rollout.agent_endpoints`."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(description="the endpoint's OpenAI base URL, e.g. http://host:8000/v1")
    model: str = Field(description="the model name sent with each request")
    api_key: str = Field("not-used", description="keep it a ${ENV_VAR} reference")
    temperature: float | None = Field(None, ge=0, description="the endpoint's default if unset")
    max_tokens: int | None = Field(
        None, ge=1, description="tokens one answer may take; unset: the endpoint's"
    )
    timeout_s: float = Field(
        120.0,
        gt=0,
        description="seconds one request may take (retried twice); 120 for a hosted model's queue",
    )

    @field_validator("base_url")
    @classmethod
    def _a_url(cls, value: str) -> str:
        # a ${VAR} reference is checked once resolved, before the run (trainer._check_agent_roles)
        problem = None if ENV_REF.search(value) else http_url_problem(value)
        if problem is not None:
            raise ValueError(
                f"{value!r} is {problem}: give the endpoint's base URL, e.g. http://host:8000/v1"
            )
        return value

    @field_validator("api_key")
    @classmethod
    def _key_is_a_reference(cls, value: str) -> str:
        # the config is copied into the run folder: a key written out would reach disk
        if value not in _NO_KEY and not ENV_REF.search(value):
            raise ValueError(
                "write the key as a ${ENV_VAR} reference (the config is copied into the run folder)"
            )
        return value


class ExternalAgent:
    """The `openai` SDK's async client on one endpoint; one per process and endpoint."""

    def __init__(self, endpoint: AgentEndpoint) -> None:
        from openai import AsyncOpenAI

        self.endpoint = endpoint
        self.client = AsyncOpenAI(
            base_url=resolve_env_refs(endpoint.base_url),
            api_key=resolve_env_refs(endpoint.api_key),
            timeout=endpoint.timeout_s,
            max_retries=2,
        )

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Reply:
        options: dict[str, Any] = {"model": self.endpoint.model, "messages": messages}
        if tools:
            options["tools"] = tools
        if self.endpoint.temperature is not None:
            options["temperature"] = self.endpoint.temperature
        if self.endpoint.max_tokens is not None:
            options["max_tokens"] = self.endpoint.max_tokens
        response = await self.client.chat.completions.create(**options)
        choice = response.choices[0]
        calls = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments or "{}"},
            }
            for call in choice.message.tool_calls or []
        ]
        usage = response.usage.model_dump() if response.usage else {}
        return Reply(
            id=response.id,
            content=choice.message.content or "",
            tool_calls=calls,
            finish_reason="tool_calls" if calls else (choice.finish_reason or "stop"),
            usage={k: v for k, v in usage.items() if isinstance(v, int)},
        )
