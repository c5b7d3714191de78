"""An agent in its own framework that trims its messages, through the gateway: each call sends the
system prompt, the task and the last exchange only (the shape LangGraph's
`trim_messages(strategy="last", include_system=True, start_on="human")` gives a chat history). Its
calls after the trim begin segments of their own; every token the policy sampled reaches the
samples once, in the segment that sampled it, and the episode trains as one unit.

Driven by the `openai` SDK's chat completions against the episode's gateway session."""

from __future__ import annotations

from gateway_support import SDKAgent
from rewriting_agents import ANSWER, QUESTION, STEPS, SYSTEM, TOOLS, call_text, result

from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.policies.client import ScriptedPolicy
from aworld_train.rollout.samples.codec import agent_units, episode_samples


def trimmed(history: list[dict]) -> list[dict]:
    """The system prompt, the task and the last assistant call with its tool result."""
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}, *history[-2:]]


async def trimming_agent(client, text: str, session) -> None:
    history: list[dict] = []
    while True:
        reply = await client.chat.completions.create(model="m", messages=trimmed(history), tools=TOOLS)
        message = reply.choices[0].message
        if not message.tool_calls:
            return
        (tool_call,) = message.tool_calls
        history += [
            message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": tool_call.id, "content": result(tool_call.model_dump())},
        ]


async def test_a_gateway_agent_that_trims_its_messages_trains_every_segment(tokenizer, im_end, make_runtime):
    policy = ScriptedPolicy(tokenizer, [*(call_text(s) for s in STEPS), ANSWER], im_end)
    traj = await Episode(SDKAgent(trimming_agent), Task("t", [QUESTION]), make_runtime(policy)).run()

    assert traj.status == "ok", traj.error
    # calls 1 and 2 share a segment (the history grows); calls 3 and 4 each begin one (the trim
    # dropped the first exchange, then the second)
    assert [len(seg.turn_starts) for seg in traj.segments] == [2, 1, 1]
    assert traj.history_rewrites == 2
    sampled = [
        [t for t, m in zip(seg.response_ids, seg.response_mask, strict=True) if m] for seg in traj.segments
    ]
    generations = [g.token_ids for g in policy.generations]
    assert sampled == [generations[0] + generations[1], generations[2], generations[3]]
    # each segment's prompt is exactly what the policy saw for the call that began it
    assert [seg.prompt_ids for seg in traj.segments[1:]] == [policy.prompts[2], policy.prompts[3]]

    samples = episode_samples(traj, train_on_malformed=False)
    assert samples.trainable and len(samples.segments) == 3
    (unit,) = agent_units([samples], [0])  # one agent, one episode: one unit of GRPO's baseline
    assert len(unit.segments) == 3
