"""An agent driver whose turns call the episode's gateway session with the `openai` (or `anthropic`)
SDK from the test itself: what tests of the gateway drive it with."""

from __future__ import annotations

from anthropic import AsyncAnthropic
from openai import AsyncOpenAI

from aworld_train.rollout.episodes.driver import AgentRole
from aworld_train.rollout.gateway.server import gateway


def openai_client(session) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=session.base_url, api_key=session.token, max_retries=0)


def anthropic_client(session) -> AsyncAnthropic:
    """Anthropic's SDK adds `/v1/messages` to its base URL: the session's, less its `/v1`."""
    return AsyncAnthropic(base_url=session.base_url.removesuffix("/v1"), api_key=session.token, max_retries=0)


class SDKAgent:
    """An agent driver whose every turn is `body(client, text, session)`: an SDK's client (`client`
    makes it from the session; the `openai` SDK's by default) called from the test against the
    episode's gateway session."""

    mcp_config: dict = {}

    def __init__(self, body, client=openai_client) -> None:
        self.body, self.client = body, client

    def roles(self) -> list[AgentRole]:
        return [AgentRole("sdk_agent")]

    def start(self, endpoint, episode_id, task, max_assistant_turns):
        return SDKRun(self.body, self.client, endpoint)


class SDKRun:
    def __init__(self, body, client, endpoint) -> None:
        self.body, self.client, self.endpoint, self.session = body, client, endpoint, None

    async def turn(self, user_turn: int, text: str) -> str | None:
        if self.session is None:
            self.session = gateway().open(self.endpoint, "sdk_agent")
        async with self.client(self.session) as client:
            await self.body(client, text, self.session)
        return None

    async def release(self) -> None:
        if self.session is not None:
            gateway().close(self.session)
