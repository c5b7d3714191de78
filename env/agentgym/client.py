"""An asyncio client for one AgentGym environment server, with AgentGym's differences absorbed.

Transient failures (connection refused or reset, HTTP 5xx, a timeout on a request that
changes nothing) are retried with exponential backoff; a server that stays unreachable
raises `ServerDown`. An environment's own refusal, which AgentGym servers answer as HTTP 200
`{"error": ...}`, raises `EnvError` at once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx

from aworld_train.env.agentgym.profiles import Profile, first, split_actions


class EnvError(Exception):
    """The environment server refused a request (its `{"error": ...}` answer)."""


class ServerDown(Exception):
    """The environment server did not answer after every retry."""


@dataclass
class StepResult:
    observation: str
    reward: float
    done: bool
    actions: list[str] | None = None


class AgentGymClient:
    def __init__(
        self,
        base_url: str,
        profile: Profile,
        timeout_s: float = 60.0,
        retries: int = 4,
        backoff_s: float = 0.25,
        max_connections: int = 512,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.profile = profile
        self.retries = retries
        self.backoff_s = backoff_s
        self._timeout = httpx.Timeout(timeout_s, connect=min(5.0, timeout_s))
        self._limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:  # made inside the server's event loop, on first use
            self._client = httpx.AsyncClient(
                base_url=self.base_url, timeout=self._timeout, limits=self._limits
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def _request(self, method: str, path: str, idempotent: bool, **kwargs) -> Any:
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = await self._http().request(method, path, **kwargs)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                last = exc  # the request never reached the environment: safe to send again
                continue
            except httpx.HTTPError as exc:
                if not idempotent:  # a step may have been taken: never take it twice
                    raise ServerDown(f"{method} {self.base_url}{path} got no answer: {exc!r}") from None
                last = exc
                continue
            if response.status_code >= 500:
                last = EnvError(f"HTTP {response.status_code}: {response.text[:200]}")
                if not idempotent:
                    raise last
                continue
            if response.status_code >= 400:
                raise EnvError(f"{method} {path}: HTTP {response.status_code}: {response.text[:300]}")
            payload = response.json()
            if isinstance(payload, dict) and "error" in payload:
                raise EnvError(str(payload["error"]))
            return payload
        if isinstance(last, EnvError):
            raise last
        raise ServerDown(
            f"AgentGym {self.profile.name} server at {self.base_url} did not answer {method} {path} "
            f"after {self.retries + 1} tries: {last!r}"
        )

    def _id_body(self, env_id: Any, id_field: str) -> dict[str, Any]:
        return {id_field: env_id}

    async def create(self) -> tuple[Any, str]:
        """A new environment: (its id, the field that carries it in later requests)."""
        # Sent again on a transient failure: at worst an unused environment is left on the server.
        payload = await self._request("POST", "/create", idempotent=True, json={})
        if isinstance(payload, dict):
            if "id" in payload or "env_idx" in payload:
                field = self.profile.id_field or ("id" if "id" in payload else "env_idx")
                return payload.get("id", payload.get("env_idx")), field
            raise EnvError(f"/create answered {payload!r}, with neither 'id' nor 'env_idx'")
        return payload, self.profile.id_field or "env_idx"

    def _result(self, payload: Any, before: str = "") -> StepResult:
        if not isinstance(payload, dict):
            return StepResult(str(payload), 0.0, False)
        observation = first(payload, self.profile.observation_keys, "")
        if not isinstance(observation, str):
            observation = str(observation)
        if before:
            observation = f"{before}\n{observation}"
        actions = None
        if self.profile.actions == "observation":
            observation, actions = split_actions(observation)
        elif self.profile.actions == "field" and isinstance(payload.get("available_actions"), list):
            actions = [str(a) for a in payload["available_actions"]]
        try:
            reward = float(first(payload, self.profile.reward_keys, 0.0) or 0.0)
        except (TypeError, ValueError):
            reward = 0.0
        return StepResult(observation, reward, bool(payload.get("done", False)), actions)

    async def reset(self, env_id: Any, id_field: str, item: int) -> StepResult:
        body = {id_field: env_id, self.profile.reset_field: item}
        payload = await self._request("POST", "/reset", idempotent=True, json=body)
        before = ""
        if isinstance(payload, dict) and self.profile.prefix_keys:
            before = "\n".join(str(payload[k]) for k in self.profile.prefix_keys if payload.get(k))
        if not isinstance(payload, dict) or not any(k in payload for k in self.profile.observation_keys):
            # WebShop and SQLGym answer /reset without the observation (WebShop with a list): read it
            observed = await self._request("GET", "/observation", idempotent=True, params={id_field: env_id})
            observed = (
                observed
                if isinstance(observed, str)
                else first(observed, self.profile.observation_keys, observed)
                if isinstance(observed, dict)
                else str(observed)
            )
            payload = {**(payload if isinstance(payload, dict) else {}), "observation": str(observed)}
        return self._result(payload, before)

    async def step(self, env_id: Any, id_field: str, action: str) -> StepResult:
        payload = await self._request(
            "POST", "/step", idempotent=False, json={id_field: env_id, "action": action}
        )
        return self._result(payload)

    async def close(self, env_id: Any, id_field: str) -> bool:
        payload = await self._request("POST", "/close", idempotent=True, json={id_field: env_id})
        return bool(payload) if not isinstance(payload, dict) else True
