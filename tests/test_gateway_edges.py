"""The gateway at its edges: concurrent calls each recorded after their own prompt, a long prompt
tokenized off the episodes' loop, calls racing their episode's end, all answered with a status
(never 500, never none), and in-process calls serialised alike. Driven with the `openai` SDK and
raw httpx. Malformed and bounded requests: tests/test_gateway_bad_requests.py."""

from __future__ import annotations

import asyncio
import gc
import random
import re
import threading
import weakref

import httpx
from gateway_support import SDKAgent
from openai import AsyncOpenAI

from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.gateway.server import advertised_host, gateway
from aworld_train.rollout.policies.client import ScriptedPolicy
from aworld_train.rollout.tokens.templates.renderer import ChatRenderer


def tagged_policy(tokenizer, im_end) -> ScriptedPolicy:
    """Answers "answer to <tag>" for the last `tag-...` of its prompt, after a pause that lets
    concurrent calls overlap inside the episode."""

    def reply(ids: list[int]) -> str:
        return "answer to " + re.findall(r"tag-[\w-]+", tokenizer.decode(ids))[-1]

    return ScriptedPolicy(tokenizer, reply, im_end, latency_s=0.002)


def sampled(segment) -> list[int]:
    return [t for t, m in zip(segment.response_ids, segment.response_mask, strict=True) if m]


def own_segments(traj, calls: dict[str, list[dict]], tokenizer, im_end) -> None:
    """Each call (by tag) has one segment: its prompt the call's own messages rendered, its sampled
    ids the policy's answer to that prompt."""
    renderer = ChatRenderer(tokenizer, tool_block="never")
    by_prompt = {tuple(seg.prompt_ids): seg for seg in traj.segments}
    assert len(by_prompt) == len(traj.segments) == len(calls)
    for tag, messages in calls.items():
        segment = by_prompt[tuple(renderer.render_prompt(messages, None, []))]
        assert sampled(segment) == tokenizer.encode(f"answer to {tag}", add_special_tokens=False) + [im_end]


async def concurrent_calls(client: AsyncOpenAI, tags: list[str]) -> dict[str, list[dict]]:
    """One call per tag, all at once; each answer must name its own call's tag."""
    calls = {tag: [{"role": "user", "content": f"Please answer {tag}."}] for tag in tags}
    answers = await asyncio.gather(
        *(client.chat.completions.create(model="m", messages=m) for m in calls.values())
    )
    assert [a.choices[0].message.content for a in answers] == [f"answer to {tag}" for tag in tags]
    return calls


async def test_concurrent_calls_on_one_session_each_train_after_their_own_prompt(
    tokenizer, im_end, make_runtime
):
    """200 calls at once on one session, and 64 sessions with 4 calls at once each."""
    policy = tagged_policy(tokenizer, im_end)
    runtime = make_runtime(policy, max_assistant_turns=256, concurrency=64)
    made: dict[str, dict] = {}

    def agent(name: str, count: int) -> SDKAgent:
        async def body(client: AsyncOpenAI, text: str, session) -> None:
            made[name] = await concurrent_calls(client, [f"tag-{name}-{k}" for k in range(count)])

        return SDKAgent(body)

    crowd = await Episode(agent("crowd", 200), Task("c", ["Go."]), runtime).run()
    assert crowd.status == "ok", crowd.error
    own_segments(crowd, made["crowd"], tokenizer, im_end)

    names = [f"s{i}" for i in range(64)]
    trajs = await asyncio.gather(*(Episode(agent(n, 4), Task(n, ["Go."]), runtime).run() for n in names))
    for name, traj in zip(names, trajs, strict=True):
        assert traj.status == "ok", traj.error
        own_segments(traj, made[name], tokenizer, im_end)


async def test_a_call_that_extends_an_answer_still_extends_the_ledger_after_concurrent_ones(
    tokenizer, im_end, make_runtime
):
    """Serialised calls keep the ledger's one-segment history for an agent that goes on from an
    answer: the concurrent calls before it start their own segments, it extends the last one."""
    policy = tagged_policy(tokenizer, im_end)

    async def body(client: AsyncOpenAI, text: str, session) -> None:
        await concurrent_calls(client, ["tag-a", "tag-b"])
        # the concurrent calls take the ledger in the order they reach it: go on from the last one
        last = re.findall(r"tag-[\w-]+", tokenizer.decode(policy.prompts[-1]))[-1]
        history = [{"role": "user", "content": f"Please answer {last}."}]
        history.append({"role": "assistant", "content": f"answer to {last}"})
        history.append({"role": "user", "content": "And tag-c?"})
        await client.chat.completions.create(model="m", messages=history)

    traj = await Episode(SDKAgent(body), Task("x", ["Go."]), make_runtime(policy)).run()
    assert traj.status == "ok", traj.error
    assert len(traj.segments) == 2
    last = traj.segments[-1]
    assert tokenizer.decode(sampled(last)).count("answer to") == 2  # the last answer, then tag-c's


async def test_a_long_prompt_is_tokenized_off_the_episodes_loop(tokenizer, im_end, make_runtime, monkeypatch):
    """Tokenizing a long prompt takes a while: the loop the episodes share goes on meanwhile."""
    from aworld_train.rollout.tokens import ledger as ledger_module

    threads: list[tuple[int, bool]] = []
    render = ledger_module.TokenLedger.prompt

    def watched(self, messages, tools):
        threads.append((len(messages[-1]["content"]), threading.current_thread() is threading.main_thread()))
        return render(self, messages, tools)

    monkeypatch.setattr(ledger_module.TokenLedger, "prompt", watched)
    policy = ScriptedPolicy(tokenizer, lambda ids: "ok", im_end)

    async def body(client: AsyncOpenAI, text: str, session) -> None:
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "short"}])
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "word " * 5_000}]
        )

    traj = await Episode(
        SDKAgent(body), Task("l", ["Hi."]), make_runtime(policy, max_total_tokens=8192)
    ).run()
    assert traj.status == "ok", traj.error
    assert threads == [(5, True), (25_000, False)]


class Ending:
    """An episode that has ended: it answers no call again (the session's close answers them)."""

    def check_call(self, *args, **kwargs) -> None:
        pass

    def ended(self) -> None:
        return None

    async def complete(self, *args, **kwargs):
        await asyncio.Event().wait()


async def test_calls_racing_their_sessions_close_are_all_answered_and_nothing_keeps_the_episode():
    """Repeated often enough to land calls on every side of the close: each one is answered 410
    (registered before the close) or 404 (after), and no ended episode stays referenced."""
    gw = gateway()
    body = {"messages": [{"role": "user", "content": "hi"}]}
    statuses: list[int] = []
    endpoints: list[weakref.ref] = []
    async with httpx.AsyncClient(timeout=10) as http:
        for _ in range(300):
            endpoint = Ending()
            session = gw.open(endpoint)
            url = f"{session.base_url}/chat/completions"
            headers = {"Authorization": f"Bearer {session.token}"}
            calls = [asyncio.ensure_future(http.post(url, json=body, headers=headers)) for _ in range(3)]
            await asyncio.sleep(random.uniform(0, 0.004))
            gw.close(session)
            answers = await asyncio.wait_for(asyncio.gather(*calls), 10)
            statuses += [a.status_code for a in answers]
            assert not session.calls
            endpoints.append(weakref.ref(endpoint))
            del endpoint, session
    assert set(statuses) <= {404, 410} and 410 in statuses and 404 in statuses, sorted(set(statuses))
    gc.collect()
    assert sum(ref() is not None for ref in endpoints) == 0


def test_a_wide_gateway_hands_out_a_dialable_url_and_loopback_stays_loopback():
    wide = gateway("0.0.0.0")
    loopback = gateway("127.0.0.1")
    assert wide is not loopback
    assert httpx.URL(loopback.url).host == "127.0.0.1"
    host = httpx.URL(wide.url).host
    assert host == advertised_host("0.0.0.0") and host not in ("0.0.0.0", "")
    named = gateway("0.0.0.0", url_host="trainer.example")
    assert httpx.URL(named.url).host == "trainer.example" and named is not wide
    # the wide one serves on every interface: loopback reaches it too
    health = httpx.get(f"http://127.0.0.1:{wide.port}/health", timeout=10)
    assert health.json()["ok"] is True


class InProcess:
    """A driver whose turn calls the episode directly, as our AWorld provider does."""

    mcp_config: dict = {}

    def __init__(self, body) -> None:
        self.body = body

    def roles(self):
        from aworld_train.rollout.episodes.driver import AgentRole

        return [AgentRole("inside")]

    def start(self, endpoint, episode_id, task, max_assistant_turns):
        body = self.body

        class Run:
            async def turn(self, user_turn: int, text: str) -> None:
                await body(endpoint)

            async def release(self) -> None:
                pass

        return Run()


async def test_in_process_calls_are_serialised_too_and_an_oversized_one_ends_the_episode(
    tokenizer, im_end, make_runtime
):
    """The ledger's lock and the token bound are the episode's: an in-process agent's parallel calls
    each train after their own prompt, and a message no budget can hold ends the episode as
    truncated before it is tokenized (its framework would only retry the same call)."""
    policy = tagged_policy(tokenizer, im_end)
    calls = {
        tag: [{"role": "user", "content": f"Please answer {tag}."}] for tag in ("tag-p", "tag-q", "tag-r")
    }

    async def parallel(endpoint) -> None:
        replies = await asyncio.gather(*(endpoint.complete(m, None, "inside") for m in calls.values()))
        assert [r.content for r in replies] == [f"answer to {tag}" for tag in calls]

    traj = await Episode(InProcess(parallel), Task("p", ["Go."]), make_runtime(policy)).run()
    assert traj.status == "ok", traj.error
    own_segments(traj, calls, tokenizer, im_end)

    async def oversized(endpoint) -> None:
        await endpoint.complete([{"role": "user", "content": "x" * 2**20}], None, "inside")

    asked = len(policy.prompts)
    traj = await Episode(InProcess(oversized), Task("o", ["Go."]), make_runtime(policy)).run()
    assert traj.status == "truncated" and "rollout.max_total_tokens=4096" in traj.error
    assert len(policy.prompts) == asked and not traj.segments
