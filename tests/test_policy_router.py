"""The policy seam: each agent's calls are sampled by the policy the runtime's router names for it;
a run with one policy serves every agent with it."""

from __future__ import annotations

from aworld_train.rollout.episodes.driver import AgentRole
from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.policies.client import ScriptedPolicy


class Team:
    """Two agents, each calling its LLM once per turn."""

    mcp_config: dict = {}

    def roles(self) -> list[AgentRole]:
        return [AgentRole("planner"), AgentRole("solver")]

    def start(self, endpoint, episode_id, task, max_assistant_turns):
        self.endpoint = endpoint
        return self

    async def turn(self, user_turn: int, text: str) -> str | None:
        for agent in ("planner", "solver"):
            await self.endpoint.complete([{"role": "user", "content": f"{agent}: {text}"}], None, agent)
        return None

    async def release(self) -> None:
        pass


async def test_each_agents_calls_are_sampled_by_its_own_policy(tokenizer, im_end, make_runtime):
    planner, solver = ScriptedPolicy(tokenizer, ["plan"], im_end), ScriptedPolicy(tokenizer, ["42"], im_end)
    runtime = make_runtime(planner, {"solver": solver})
    traj = await Episode(Team(), Task("t", ["go"]), runtime).run()
    assert traj.status == "ok", traj.error
    assert [tokenizer.decode(p).count("planner: go") for p in planner.prompts] == [1]
    assert [tokenizer.decode(p).count("solver: go") for p in solver.prompts] == [1]
    sampled = {
        s.agent: tokenizer.decode([t for t, m in zip(s.response_ids, s.response_mask, strict=True) if m])
        for s in traj.segments
    }
    assert sampled == {"planner": "plan<|im_end|>", "solver": "42<|im_end|>"}


async def test_one_policy_serves_every_agent(tokenizer, im_end, make_runtime):
    policy = ScriptedPolicy(tokenizer, ["plan", "42"], im_end)
    traj = await Episode(Team(), Task("t", ["go"]), make_runtime(policy)).run()
    assert traj.status == "ok" and len(policy.prompts) == 2
