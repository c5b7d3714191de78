"""The gateway's answer to requests it cannot take: malformed bodies and messages refused with
their field, rewards that are no finite number and token ids outside the vocabulary refused, requests
beyond the prompt, body and length bounds refused promptly, a body that never arrives answered 408;
each with a status (never 500, never none), and the episode goes on. Driven with the `openai` SDK
and raw httpx (the gateway's other edges: tests/test_gateway_edges.py)."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest
from gateway_support import SDKAgent
from openai import APIStatusError, AsyncOpenAI

from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.gateway.server import Gateway
from aworld_train.rollout.policies.client import ScriptedPolicy

BAD_REWARDS = ("NaN", "Infinity", "-Infinity", "1e309", '"high"', "true")


def malformed_chats(user: dict) -> dict[str, dict]:
    """Chat completion requests whose messages or tools are malformed, by case."""
    return {
        "no_role": {"messages": [{"content": "hi"}]},
        "wizard": {"messages": [{"role": "wizard", "content": "hi"}]},
        "tool_calls_not_a_list": {
            "messages": [user, {"role": "assistant", "content": None, "tool_calls": {"id": "1"}}]
        },
        "tool_call_without_function": {
            "messages": [user, {"role": "assistant", "tool_calls": [{"id": "1", "type": "function"}]}]
        },
        "tool_without_call_id": {"messages": [user, {"role": "tool", "content": "5"}]},
        "message_not_an_object": {"messages": ["hi"]},
        "tool_not_a_function": {"messages": [user], "tools": [{"type": "function"}]},
    }


async def post_bad_requests(
    http: httpx.AsyncClient, user: dict, vocabulary: int
) -> dict[str, httpx.Response]:
    """Each bad request, by case, and its answer: malformed chats, bodies that are too deep, no JSON,
    not an object or hold a NaN; rewards that are no finite number; token ids outside the vocabulary."""
    got = {}
    for case, request in malformed_chats(user).items():
        got[case] = await http.post("/chat/completions", json=request)
    got["deep"] = await http.post("/chat/completions", content=b"[" * 10_000 + b"]" * 10_000)
    got["not_json"] = await http.post("/chat/completions", content=b"{messages")
    got["a_list"] = await http.post("/chat/completions", content=b"[]")
    got["nan_temperature"] = await http.post(
        "/chat/completions",
        content=b'{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
    )
    for value in BAD_REWARDS:
        got[f"reward {value}"] = await http.post("/reward", content=b'{"reward": %s}' % value.encode())
    got["reward extras"] = await http.post("/reward", json={"reward": 1, "extras": [1]})
    for ids in ([-1], [10**12], [1, vocabulary]):
        got[f"ids {ids}"] = await http.post("/completions", json={"prompt": ids})
    return got


async def test_bad_requests_are_refused_with_their_field_and_the_episode_goes_on(
    tokenizer, im_end, make_runtime
):
    policy = ScriptedPolicy(tokenizer, lambda ids: "ok", im_end)
    got: dict[str, httpx.Response] = {}

    async def body(client: AsyncOpenAI, text: str, session) -> None:
        headers = {"Authorization": f"Bearer {session.token}", "Content-Type": "application/json"}
        user = {"role": "user", "content": text}
        async with httpx.AsyncClient(base_url=session.base_url, headers=headers, timeout=30) as http:
            got.update(await post_bad_requests(http, user, len(tokenizer)))
        await client.chat.completions.create(model="m", messages=[user])  # the episode goes on

    traj = await Episode(SDKAgent(body), Task("b", ["Hi."]), make_runtime(policy)).run()
    assert traj.status == "ok", traj.error
    assert len(policy.prompts) == 1 and len(traj.segments) == 1  # no refused call reached the ledger
    params = {case: (r.status_code, r.json()["error"]["param"]) for case, r in got.items()}
    assert params == {
        "no_role": (400, "messages.0.role"),
        "wizard": (400, "messages.0.role"),
        "tool_calls_not_a_list": (400, "messages.1.tool_calls"),
        "tool_call_without_function": (400, "messages.1.tool_calls.0.function"),
        "tool_without_call_id": (400, "messages.1.tool_call_id"),
        "message_not_an_object": (400, "messages.0"),
        "tool_not_a_function": (400, "tools.0.function"),
        "deep": (400, None),
        "not_json": (400, None),
        "a_list": (400, None),
        "nan_temperature": (400, "temperature"),
        **{f"reward {v}": (400, "reward") for v in BAD_REWARDS},
        "reward extras": (400, "extras"),
        "ids [-1]": (400, "prompt[0]"),
        "ids [1000000000000]": (400, "prompt[0]"),
        f"ids [1, {len(tokenizer)}]": (400, "prompt[1]"),
    }
    messages = {case: r.json()["error"]["message"] for case, r in got.items()}
    assert (
        "'wizard' is not a role" in messages["wizard"]
        and "system, developer, user, assistant, tool" in messages["wizard"]
    )
    assert "nests deeper than 200 levels" in messages["deep"]
    assert "outside the vocabulary" in messages["ids [-1]"]
    assert traj.reported_reward is None  # no refused reward was kept


async def test_requests_beyond_the_bounds_are_refused_promptly_and_the_episode_goes_on(
    tokenizer, im_end, make_runtime
):
    policy = ScriptedPolicy(tokenizer, lambda ids: "ok", im_end)
    got: dict = {}

    async def body(client: AsyncOpenAI, text: str, session) -> None:
        user = {"role": "user", "content": text}
        with pytest.raises(APIStatusError) as over_budget:  # 1 MB of text: beyond any 4096-token prompt
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x" * 2**20}]
            )
        got["budget"] = over_budget.value
        with pytest.raises(APIStatusError) as over_body:  # 10 MB: beyond the body limit
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x" * 10 * 2**20}]
            )
        got["body"] = over_body.value
        with pytest.raises(APIStatusError) as long_text:
            await client.completions.create(model="m", prompt="x" * 2**20)
        got["text"] = long_text.value
        got["huge_length"] = await raw_post(session, b"", content_length=10 * 2**30)

        async def chunks():  # no Content-Length: the limit counts what arrives
            yield b'{"messages": [{"role": "user", "content": "'
            for _ in range(10):
                yield b"x" * 2**20

        headers = {"Authorization": f"Bearer {session.token}"}
        async with httpx.AsyncClient(timeout=30) as http:
            got["chunked"] = await http.post(
                f"{session.base_url}/chat/completions", content=chunks(), headers=headers
            )
        await client.chat.completions.create(model="m", messages=[user])

    traj = await Episode(SDKAgent(body), Task("s", ["Hi."]), make_runtime(policy)).run()
    assert traj.status == "ok", traj.error
    assert len(policy.prompts) == 1 and len(traj.segments) == 1
    assert got["budget"].status_code == got["text"].status_code == got["body"].status_code == 413
    assert "at least" in got["budget"].message and "rollout.max_total_tokens=4096" in got["budget"].message
    assert got["budget"].body["param"] == "messages" and got["text"].body["param"] == "prompt"
    assert (
        got["chunked"].status_code == 413
        and "over 8388608 bytes" in got["chunked"].json()["error"]["message"]
    )
    assert got["huge_length"].startswith(b"HTTP/1.1 413")  # from its Content-Length, nothing read


async def raw_post(session, body: bytes, content_length: int, wait_s: float = 10) -> bytes:
    """A POST whose Content-Length says `content_length` and whose body is `body` (maybe less): the
    answer (head and body), which must come within `wait_s`."""
    url = httpx.URL(session.base_url)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    head = (
        f"POST {url.path}/chat/completions HTTP/1.1\r\nHost: {url.host}\r\n"
        f"Authorization: Bearer {session.token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {content_length}\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()
    try:
        async with asyncio.timeout(wait_s):
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"content-length: (\d+)", head, re.IGNORECASE)[1])
            return head + await reader.readexactly(length)
    finally:
        writer.close()


async def test_a_body_that_never_arrives_is_answered_408():
    class Idle:
        def check_call(self, *args, **kwargs) -> None:
            pass

        def ended(self) -> None:
            return None

    slow = Gateway(body_timeout_s=0.5)
    session = slow.open(Idle())
    answer = await raw_post(session, b'{"messages": ', content_length=100)
    slow.close(session)
    assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within 0.5s" in answer
