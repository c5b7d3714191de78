"""The gateway's other APIs: OpenAI's Responses API and Anthropic's Messages API keep the same exact
ledger as chat completions (driven by the real `openai` and `anthropic` SDKs against an episode of
a scripted policy), and a call whose answer ends the episode is answered 410 with the episode's
reason. Each API's options and inputs reaching the call: tests/test_gateway_api_options.py; what
the gateway cannot honour, unknown paths and ended episodes: tests/test_gateway_api_errors.py."""

from __future__ import annotations

import asyncio
import json

import httpx
from anthropic import AsyncAnthropic
from gateway_api_support import ANTHROPIC_TOOLS, RESPONSES_TOOLS
from gateway_support import SDKAgent, anthropic_client
from openai import AsyncOpenAI

from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.policies.client import ScriptedPolicy

TASK = Task("a", ["What is 2 + 3?"])


def call(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def calculator(tokenizer, im_end) -> ScriptedPolicy:
    """Calls the calculator, then answers with its result."""
    return ScriptedPolicy(tokenizer, [call("calculate", {"expression": "2 + 3"}), "It is 5."], im_end)


def one_exact_segment(traj, policy: ScriptedPolicy, tokenizer) -> None:
    """The whole episode is one segment: its sampled ids (mask 1) are exactly the policy's, each later
    prompt extends it, and the tool's result is in it as prompt (mask 0), never as loss."""
    assert traj.status == "ok", traj.error
    (segment,) = traj.segments
    assert traj.history_rewrites == 0
    ids, mask = segment.response_ids, segment.response_mask
    assert [t for t, m in zip(ids, mask, strict=True) if m] == [
        t for g in policy.generations for t in g.token_ids
    ]
    for prompt in policy.prompts[1:]:
        assert segment.ids[: len(prompt)] == prompt
    unmasked = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if not m])
    assert "<tool_response>\n5\n</tool_response>" in unmasked
    assert [(c.name, c.arguments, c.result) for c in traj.tool_calls] == [
        ("calculate", {"expression": "2 + 3"}, "5")
    ]
    assert traj.final_answer == "It is 5."


async def test_a_responses_api_agent_echoing_its_items_keeps_one_exact_ledger(
    tokenizer, im_end, make_runtime
):
    policy = calculator(tokenizer, im_end)
    got: dict = {}

    async def body(client: AsyncOpenAI, text: str, session) -> None:
        items: list = [{"role": "user", "content": text}]
        first = await client.responses.create(
            model="m", instructions="You compute.", input=items, tools=RESPONSES_TOOLS
        )
        got["first"] = first
        items += [item.model_dump(mode="json", exclude_none=True, by_alias=True) for item in first.output]
        items.append({"type": "function_call_output", "call_id": first.output[0].call_id, "output": "5"})
        got["final"] = await client.responses.create(
            model="m", instructions="You compute.", input=items, tools=RESPONSES_TOOLS
        )

    traj = await Episode(SDKAgent(body), TASK, make_runtime(policy)).run()
    one_exact_segment(traj, policy, tokenizer)
    first, final = got["first"], got["final"]
    assert first.status == "completed" and [o.type for o in first.output] == ["function_call"]
    (function_call,) = first.output
    assert function_call.name == "calculate" and json.loads(function_call.arguments) == {
        "expression": "2 + 3"
    }
    assert function_call.call_id == traj.tool_calls[0].id and function_call.id.startswith("fc_")
    assert final.output_text == "It is 5." and final.id.startswith("resp_")
    assert final.usage.input_tokens == len(policy.prompts[1])
    assert final.usage.output_tokens == len(policy.generations[1].token_ids)
    assert "You compute." in tokenizer.decode(policy.prompts[0])  # the instructions: the system message


async def test_a_streamed_responses_api_agent_continues_by_previous_response_id(
    tokenizer, im_end, make_runtime
):
    policy = calculator(tokenizer, im_end)
    got: dict = {}

    async def body(client: AsyncOpenAI, text: str, session) -> None:
        async with client.responses.stream(
            model="m", instructions="You compute.", input=text, tools=RESPONSES_TOOLS
        ) as stream:
            got["first_events"] = [event.type async for event in stream]
            first = await stream.get_final_response()
        got["call"] = first.output[0]
        output = {"type": "function_call_output", "call_id": first.output[0].call_id, "output": "5"}
        stream = await client.responses.create(
            model="m",
            instructions="You compute.",
            previous_response_id=first.id,
            input=[output],
            tools=RESPONSES_TOOLS,
            stream=True,
        )
        got["final_events"] = [event async for event in stream]

    traj = await Episode(SDKAgent(body), TASK, make_runtime(policy)).run()
    one_exact_segment(traj, policy, tokenizer)
    assert got["first_events"] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert json.loads(got["call"].arguments) == {"expression": "2 + 3"}
    final = got["final_events"]
    assert [e.type for e in final] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in final] == list(range(len(final)))
    assert final[-1].response.output_text == "It is 5." == final[4].delta
    assert final[-1].response.previous_response_id == final[0].response.previous_response_id


async def test_an_anthropic_agent_round_trips_a_tool_use_in_one_exact_segment(
    tokenizer, im_end, make_runtime
):
    policy = calculator(tokenizer, im_end)
    got: dict = {}

    async def body(client: AsyncAnthropic, text: str, session) -> None:
        messages: list = [{"role": "user", "content": text}]
        first = await client.messages.create(
            model="m", max_tokens=256, system="You compute.", messages=messages, tools=ANTHROPIC_TOOLS
        )
        got["first"] = first
        (use,) = first.content
        messages.append(
            {
                "role": "assistant",
                "content": [b.model_dump(mode="json", exclude_none=True) for b in first.content],
            }
        )
        messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "5"}]}
        )
        async with client.messages.stream(
            model="m", max_tokens=256, system="You compute.", messages=messages, tools=ANTHROPIC_TOOLS
        ) as stream:
            got["events"] = [event.type async for event in stream]
            got["final"] = await stream.get_final_message()

    traj = await Episode(SDKAgent(body, anthropic_client), TASK, make_runtime(policy)).run()
    one_exact_segment(traj, policy, tokenizer)
    first, final = got["first"], got["final"]
    assert first.stop_reason == "tool_use" and first.id.startswith("msg_")
    (use,) = first.content
    assert (use.type, use.name, use.input) == ("tool_use", "calculate", {"expression": "2 + 3"})
    assert use.id == traj.tool_calls[0].id
    assert first.usage.input_tokens == len(policy.prompts[0])
    assert final.stop_reason == "end_turn" and [(b.type, b.text) for b in final.content] == [
        ("text", "It is 5.")
    ]
    assert got["events"][0] == "message_start" and got["events"][-1] == "message_stop"
    assert "You compute." in tokenizer.decode(policy.prompts[0])


async def test_a_streamed_anthropic_tool_use_carries_its_input(tokenizer, im_end, make_runtime):
    policy = ScriptedPolicy(tokenizer, [call("calculate", {"expression": "2 + 3"})], im_end)
    got: dict = {}

    async def body(client: AsyncAnthropic, text: str, session) -> None:
        async with client.messages.stream(
            model="m", max_tokens=256, messages=[{"role": "user", "content": text}], tools=ANTHROPIC_TOOLS
        ) as stream:
            got["message"] = await stream.get_final_message()

    await Episode(SDKAgent(body, anthropic_client), TASK, make_runtime(policy, max_assistant_turns=1)).run()
    message = got["message"]
    assert message.stop_reason == "tool_use"
    assert [(b.type, b.name, b.input) for b in message.content] == [
        ("tool_use", "calculate", {"expression": "2 + 3"})
    ]


async def test_a_call_whose_answer_ends_the_episode_gets_410_with_the_episodes_reason(
    tokenizer, im_end, make_runtime
):
    policy = ScriptedPolicy(tokenizer, ["<tool_call>\n{not json}\n</tool_call>"], im_end)
    got: dict = {}
    http = httpx.AsyncClient(timeout=30)

    async def body(client: AsyncOpenAI, text: str, session) -> None:
        request = http.post(
            f"{session.base_url}/responses",
            json={"input": text, "tools": RESPONSES_TOOLS},
            headers={"Authorization": f"Bearer {session.token}"},
        )
        # the call outlives the agent's turn, which the episode's end cancels
        got["call"] = asyncio.ensure_future(request)
        await asyncio.shield(got["call"])

    traj = await Episode(SDKAgent(body), TASK, make_runtime(policy)).run()
    answer = await got["call"]
    await http.aclose()
    assert traj.status == "malformed_tool_call" and traj.error
    assert answer.status_code == 410
    assert answer.json()["error"]["message"] == (
        f"the episode ended as malformed_tool_call: {traj.error}; no more calls are answered"
    )
