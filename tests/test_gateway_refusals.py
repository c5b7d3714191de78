"""What the gateway refuses it refuses alike on every API and says why in the run's terms, with what
to send instead: an image (the policy would answer without having seen it), `top_logprobs` (only the
sampled token's logprob is known), a field out of its bounds; and it names one model, the one each
turn hands the agent. Driven by the real `openai` and `anthropic` SDKs against a gateway session."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from gateway_api_support import Recording
from gateway_support import anthropic_client, openai_client

from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.gateway.process_agent import ProcessAgent
from aworld_train.rollout.gateway.server import gateway
from aworld_train.rollout.policies.client import ScriptedPolicy

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "calculator_gateway"
IMAGE_REASON = "the policy reads text only, and would be trained on an answer given without seeing them"
# pydantic's own words: a refusal in them says what is wrong, not why nor what to do
PYDANTIC_WORDS = ("Input should", "Value error", "Field required", "valid integer", "less than")
USER = {"role": "user", "content": "What is 2 + 3?"}


@pytest.fixture
async def opened():
    recording = Recording()
    session = gateway().open(recording, "calculator_agent")
    yield session, recording
    gateway().close(session)


def refusal(exc: openai.APIStatusError | anthropic.APIStatusError) -> tuple[int, str]:
    """The status and message of an SDK's error (the same field in OpenAI's and Anthropic's shapes)."""
    return exc.status_code, exc.response.json()["error"]["message"]


async def test_an_image_is_refused_alike_on_every_api_and_the_episode_goes_on(opened):
    session, recording = opened
    image = "https://example.com/cat.png"
    async with openai_client(session) as oai, anthropic_client(session) as claude:
        refused = {}
        chat_parts = [
            {"type": "text", "text": "What is in it?"},
            {"type": "image_url", "image_url": {"url": image}},
        ]
        with pytest.raises(openai.BadRequestError) as got:
            await oai.chat.completions.create(model="m", messages=[{"role": "user", "content": chat_parts}])
        refused["chat"] = got.value
        with pytest.raises(openai.BadRequestError) as got:
            await oai.responses.create(
                model="m",
                input=[
                    {
                        "role": "user",
                        "content": [{"type": "input_image", "image_url": image, "detail": "auto"}],
                    }
                ],
            )
        refused["responses"] = got.value
        with pytest.raises(anthropic.BadRequestError) as got:
            await claude.messages.create(
                model="m",
                max_tokens=9,
                messages=[
                    {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": image}}]}
                ],
            )
        refused["messages"] = got.value
        # a tool's result that is an image is refused too: the policy would read an empty result
        tool_image = [
            USER,
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": [{"type": "image_url", "image_url": {"url": image}}],
            },
        ]
        with pytest.raises(openai.BadRequestError) as got:
            await oai.chat.completions.create(model="m", messages=tool_image)
        refused["chat tool result"] = got.value
        answered = await oai.chat.completions.create(model="m", messages=[USER])
    assert {api: exc.status_code for api, exc in refused.items()} == dict.fromkeys(refused, 400)
    messages = {api: refusal(exc)[1] for api, exc in refused.items()}
    assert messages["chat"].startswith("messages.0.content.1.type: 'image_url' parts are not served")
    assert messages["chat tool result"].startswith("messages.2.content.0.type: 'image_url' parts")
    assert messages["responses"].startswith("input.0.content.0.type: 'input_image' parts are not served")
    assert messages["messages"].startswith("messages.0.content.0.type: 'image' blocks are not served")
    assert all(IMAGE_REASON in message for message in messages.values())
    assert refused["chat"].body["param"] == "messages.0.content.1.type"
    assert len(recording.calls) == 1 and answered.choices[0].message.content == "ok"  # only the text call


async def test_top_logprobs_and_out_of_bound_fields_are_refused_saying_why_and_what_to_do(opened):
    session, recording = opened
    async with openai_client(session) as oai, anthropic_client(session) as claude:
        calls = {
            "chat top_logprobs": oai.chat.completions.create(
                model="m", messages=[USER], logprobs=True, top_logprobs=3
            ),
            "responses top_logprobs": oai.responses.create(model="m", input="Go.", top_logprobs=3),
            "n": oai.chat.completions.create(model="m", messages=[USER], n=20),
            "max_tokens": oai.chat.completions.create(model="m", messages=[USER], max_tokens=0),
            "stop": oai.chat.completions.create(model="m", messages=[USER], stop=["a", "b", "c", "d", "e"]),
            "temperature": oai.chat.completions.create(model="m", messages=[USER], temperature=-1),
            "completions logprobs": oai.completions.create(model="m", prompt="Go", logprobs=5),
            "echo": oai.completions.create(model="m", prompt="Go", echo=True),
            "max_output_tokens": oai.responses.create(model="m", input="Go.", max_output_tokens=0),
            "anthropic max_tokens": claude.messages.create(model="m", max_tokens=0, messages=[USER]),
        }
        refused = {}
        for case, call in calls.items():
            with pytest.raises((openai.BadRequestError, anthropic.BadRequestError)) as got:
                await call
            refused[case] = refusal(got.value)[1]
    assert not recording.calls
    assert refused["chat top_logprobs"] == (
        "top_logprobs: only the sampled token's logprob is known (the policy's other candidates are not "
        "kept): leave top_logprobs out (logprobs: true gives each sampled token's logprob)"
    )
    assert "include 'message.output_text.logprobs'" in refused["responses top_logprobs"]
    expected = {
        "n": "n: got 20: give 1 to 16 choices",
        "max_tokens": "max_tokens: got 0: give a whole number of tokens, at least 1",
        "stop": 'stop: got ["a", "b", "c", "d", "e"]: give a string, or a list of at most 4 strings',
        "temperature": "temperature: got -1: give a number of 0 or more, or leave it out: it is ignored",
        "completions logprobs": "logprobs: got 5: only the sampled token's logprob is known: give 1",
        "echo": "echo: got true: the prompt is not echoed back",
        "max_output_tokens": "max_output_tokens: got 0: give a whole number of tokens",
        "anthropic max_tokens": "max_tokens: got 0: give a whole number of tokens, at least 1: Anthropic's API",
    }
    for case, start in expected.items():
        assert refused[case].startswith(start), (case, refused[case])
    for case, message in refused.items():
        assert not any(words in message for words in PYDANTIC_WORDS), (case, message)


async def test_a_missing_or_mistyped_field_names_itself_and_what_to_send(opened):
    """Bodies no SDK would send, as raw HTTP: the field, why and what to send, never pydantic's words."""
    session, _ = opened
    headers = {"Authorization": f"Bearer {session.token}"}
    async with httpx.AsyncClient(base_url=session.base_url, headers=headers, timeout=30) as http:
        bodies = {
            "no messages": {"model": "m"},
            "messages not a list": {"model": "m", "messages": "hi"},
            "a message not an object": {"model": "m", "messages": ["hi"]},
            "stop not text": {"model": "m", "messages": [USER], "stop": 5},
            "a reward as text": {"reward": "high"},
            "a reward's unknown field": {"reward": 1.0, "score": 1.0},
        }
        answers = {}
        for case, body in bodies.items():
            response = await http.post("/reward" if "reward" in case else "/chat/completions", json=body)
            error = response.json()["error"]
            answers[case] = (response.status_code, error["param"], error["message"])
    assert {case: answer[:2] for case, answer in answers.items()} == {
        "no messages": (400, "messages"),
        "messages not a list": (400, "messages"),
        "a message not an object": (400, "messages.0"),
        "stop not text": (400, "stop"),
        "a reward as text": (400, "reward"),
        "a reward's unknown field": (400, "score"),
    }
    assert answers["no messages"][2].startswith("messages: missing: give a list of at least one message")
    assert "a list of at most 4 strings" in answers["stop not text"][2]
    assert "send a number" in answers["a reward as text"][2]
    assert "not a field of this request: leave it out" in answers["a reward's unknown field"][2]
    for case, (_, _, message) in answers.items():
        assert not any(words in message for words in PYDANTIC_WORDS), (case, message)


MODELS_AGENT = """
import json, sys
sys.path.insert(0, {example!r})
from openai import AsyncOpenAI
from turns import serve


async def run_turn(turn, state):
    client = AsyncOpenAI(base_url=turn["base_url"], api_key=turn["api_key"], max_retries=0)
    listed = [m.id for m in (await client.models.list()).data]
    answer = await client.chat.completions.create(model=listed[0], messages=[{{"role": "user", "content": turn["text"]}}])
    other = await client.chat.completions.create(model="gpt-4o", messages=[{{"role": "user", "content": turn["text"]}}])
    return json.dumps({{"handed": turn["model"], "listed": listed, "answered": answer.model, "other": other.model}})


if __name__ == "__main__":
    import asyncio

    asyncio.run(serve(run_turn))
"""


async def test_models_lists_the_one_name_each_turn_hands_the_agent(tmp_path, tokenizer, im_end, make_runtime):
    """An agent process lists the session's models with the SDK's `models.list()`: it finds the name
    its turn handed it, and is answered under it; any other name is answered by the same policy."""
    script = tmp_path / "models_agent.py"
    script.write_text(MODELS_AGENT.format(example=str(EXAMPLE)))
    agent = ProcessAgent(name="calculator_agent", command=[sys.executable, str(script)])
    policy = ScriptedPolicy(tokenizer, lambda ids: "5", im_end)
    traj = await Episode(agent, Task("m", ["What is 2 + 3?"]), make_runtime(policy)).run()
    assert traj.status == "ok", traj.error
    seen = json.loads(traj.final_answer)
    assert seen == {
        "handed": "calculator_agent",
        "listed": ["calculator_agent"],
        "answered": "calculator_agent",
        "other": "gpt-4o",
    }
    assert len(policy.prompts) == 2  # both names reached the same policy
