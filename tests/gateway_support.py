"""An agent driver whose turns call the episode's gateway session with the `openai` SDK from the
test itself: what tests of the gateway drive it with."""

from __future__ import annotations

from openai import AsyncOpenAI

from aworld_train.rollout.episodes.driver import AgentRole
from aworld_train.rollout.gateway.server import gateway


class SDKAgent:
    """An agent driver whose every turn is `body(client, text, session)`: the `openai` SDK called
    from the test against the episode's gateway session."""

    mcp_config: dict = {}

    def __init__(self, body) -> None:
        self.body = body

    def roles(self) -> list[AgentRole]:
        return [AgentRole("sdk_agent")]

    def start(self, endpoint, episode_id, task, max_turns):
        return SDKRun(self.body, endpoint)


class SDKRun:
    def __init__(self, body, endpoint) -> None:
        self.body, self.endpoint, self.session = body, endpoint, None

    async def turn(self, user_turn: int, text: str) -> str | None:
        if self.session is None:
            self.session = gateway().open(self.endpoint, "sdk_agent")
        async with AsyncOpenAI(
            base_url=self.session.base_url, api_key=self.session.token, max_retries=0
        ) as client:
            await self.body(client, text, self.session)
        return None

    async def release(self) -> None:
        if self.session is not None:
            gateway().close(self.session)
