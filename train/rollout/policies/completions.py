"""An OpenAI-compatible completions endpoint as PolicyClient: token ids in, token ids out.

Speaks the shape vLLM's server accepts and returns on `POST /v1/completions`: the prompt
is a list of token ids (the ledger, never re-templated), `logprobs` asks for the sampled
token's logprob, and `return_tokens_as_token_ids` makes each returned token read
`token_id:<id>`, so the sampled ids come back exactly (vLLM 0.10.2 and later also return
them as `choices[0].token_ids` when asked with `return_token_ids`). A server that answers
with token text instead of ids is refused: decoded text re-tokenised is not what was sampled.

vLLM returns the logprobs of the raw model output unless it runs with
`--logprobs-mode processed_logprobs`; they matter for training, not for evaluation.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from aworld_train.core.errors import AworldTrainError
from aworld_train.rollout.policies.client import FinishReason, Generation, SamplingParams

_TOKEN_PREFIX = "token_id:"
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class PolicyServerError(AworldTrainError):
    """The completions endpoint refused a request or answered in a shape we cannot use."""


def completions_url(base_url: str) -> str:
    """`http://host:8000/v1` or `.../v1/completions` -> the completions URL."""
    url = base_url.rstrip("/")
    return url if url.endswith("/completions") else url + "/completions"


class CompletionsPolicy:
    def __init__(
        self,
        base_url: str,
        model: str,
        stop_token_ids: list[int] | None = None,
        api_key: str | None = None,
        timeout_s: float = 300.0,
        retries: int = 3,
        max_connections: int = 256,
    ) -> None:
        self.url = completions_url(base_url)
        self.model = model
        self.stop_token_ids = list(stop_token_ids or [])
        self.retries = retries
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client_args = {
            "timeout": httpx.Timeout(timeout_s, connect=10.0),
            "limits": httpx.Limits(max_connections=max_connections),
            "headers": headers,
        }
        self._clients: dict[int, httpx.AsyncClient] = {}  # one per event loop (asyncio.run per eval)
        self.requests = 0

    def body(
        self, prompt_ids: list[int], sampling: SamplingParams, model: str | None = None
    ) -> dict[str, Any]:
        """The completions request; `model`: the served name to sample with (default: this policy's)."""
        body: dict[str, Any] = {
            "model": model or self.model,
            "prompt": list(prompt_ids),
            "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 0,  # the sampled token's own logprob only
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
            "skip_special_tokens": False,
        }
        if sampling.top_k > 0:
            body["top_k"] = sampling.top_k
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if self.stop_token_ids:
            # the chat turn's end token stops sampling even where the model's own eos differs
            body["stop_token_ids"] = self.stop_token_ids
        return body

    def _client(self) -> httpx.AsyncClient:
        key = id(asyncio.get_running_loop())
        client = self._clients.get(key)
        if client is None or client.is_closed:
            client = self._clients[key] = httpx.AsyncClient(**self._client_args)
        return client

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingParams, model: str | None = None
    ) -> Generation:
        body = self.body(prompt_ids, sampling, model)
        delay = 0.5
        for attempt in range(self.retries + 1):
            try:
                response = await self._client().post(self.url, json=body)
            except httpx.TransportError as exc:  # refused, reset, timed out: worth another try
                if attempt == self.retries:
                    raise PolicyServerError(
                        f"completions endpoint {self.url} did not answer after {self.retries + 1} tries: {exc}"
                    ) from None
            else:
                if response.status_code not in _RETRY_STATUS or attempt == self.retries:
                    break
            await asyncio.sleep(delay)
            delay *= 2
        self.requests += 1
        if response.status_code != 200:
            raise PolicyServerError(
                f"completions endpoint {self.url} answered HTTP {response.status_code}: {response.text[:500]}"
            )
        return parse_completion(response.json(), self.url)

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()


def parse_completion(data: dict[str, Any], url: str = "the endpoint") -> Generation:
    """The first choice of a completions response as a Generation (ids, logprobs, finish reason)."""
    try:
        choice = data["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise PolicyServerError(f"{url} answered without choices: {str(data)[:300]}") from None
    logprobs = choice.get("logprobs") or {}
    if "content" in logprobs and logprobs.get("content") is not None:  # the chat-style shape
        tokens = [entry.get("token") for entry in logprobs["content"]]
        values = [entry.get("logprob") for entry in logprobs["content"]]
    else:
        tokens, values = logprobs.get("tokens"), logprobs.get("token_logprobs")
    if tokens is None or values is None:
        raise PolicyServerError(
            f"{url} returned no logprobs; it must honour `logprobs` (vLLM's /v1/completions does)"
        )
    ids = choice.get("token_ids")
    if ids is None:
        ids = [_token_id(token, url) for token in tokens]
    if len(ids) != len(values):
        raise PolicyServerError(f"{url} returned {len(ids)} token ids but {len(values)} logprobs")
    finish: FinishReason = {"stop": "stop", "length": "length"}.get(choice.get("finish_reason"), "abort")
    return Generation(
        [int(i) for i in ids],
        [float(v) if v is not None else 0.0 for v in values],
        finish,
        meta={"stop_reason": choice.get("stop_reason")},
    )


def _token_id(token: Any, url: str) -> int:
    if isinstance(token, str) and token.startswith(_TOKEN_PREFIX):
        return int(token[len(_TOKEN_PREFIX) :])
    raise PolicyServerError(
        f"{url} returned token text ({token!r}) instead of ids: start vLLM with "
        "--return-tokens-as-token-ids, or use a server that honours `return_tokens_as_token_ids`"
    )
