"""The GAIA gateway's container restarted mid-run (real Docker; the image the container tests built is
reused): the episodes whose tool calls it dropped end as `tool_server_down`, and once it answers
again the later episodes succeed. The GAIA agent runs the sample's ten tasks through the container
with a scripted policy; the container stops while every episode of a batch waits on its first
call, those calls then go out, and the container starts again after the batch. Skipped with one
line where there is no Docker engine, never under CI."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from docker_support import require_engine
from faults_support import assert_flat, record, resources, settled_resources
from gaia_container_support import started_container
from gaia_support import SAMPLE, TOKEN, scripted_gaia_model

from aworld_train.rollout.policies.client import ScriptedPolicy

pytestmark = pytest.mark.timeout(1200)

TOOLS = ["documents", "python", "calculator"]


@pytest.fixture(scope="module")
def container(tmp_path_factory):
    require_engine()
    with started_container(tmp_path_factory.mktemp("gaia-restart")) as box:
        yield box


class HeldPolicy:
    """The scripted GAIA policy, whose first calls of a batch wait until `release` is set."""

    def __init__(self, scripted: ScriptedPolicy) -> None:
        self.scripted = scripted
        self.hold = False
        self.waiting = 0
        self.release = asyncio.Event()

    async def generate(self, prompt_ids, sampling):
        if self.hold and "<tool_response>" not in self.scripted.tokenizer.decode(prompt_ids):
            self.waiting += 1
            await self.release.wait()
        return await self.scripted.generate(prompt_ids, sampling)


def healthy(container, limit_s: float = 120.0) -> float:
    """Seconds until the container's /health answers."""
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        try:
            if httpx.get(f"http://127.0.0.1:{container.port}/health", timeout=2).status_code == 200:
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"the container did not answer /health within {limit_s:g}s")


async def test_a_restarted_container_fails_the_episodes_in_flight_and_later_ones_succeed(
    container, tokenizer, im_end, make_runner
):
    from aworld_train.agents.gaia import build_agent
    from aworld_train.aworld.specs import load_agent_spec
    from aworld_train.env.gaia.data import load_gaia
    from aworld_train.inputs.dataset import load_tasks
    from aworld_train.inputs.reward import RewardFunction
    from aworld_train.rollout.policies.router import PolicyRouter

    spec = load_agent_spec(build_agent(url=container.url, servers=TOOLS, authorization=TOKEN))
    tasks = load_tasks(load_gaia(SAMPLE))
    runner = make_runner(spec, RewardFunction.load("aworld_train.rewards.gaia:gaia_reward"), max_assistant_turns=4,
                         max_new_tokens=256, episode_timeout_s=120)  # fmt: skip
    policy = HeldPolicy(ScriptedPolicy(tokenizer, scripted_gaia_model(tokenizer), im_end))
    router = PolicyRouter(policy)

    warm = await runner.run_batch(router, tasks)
    assert [t.status for t in warm] == ["ok"] * len(tasks)
    before = resources()

    policy.hold = True
    batch = asyncio.ensure_future(runner.run_batch(router, tasks))
    while policy.waiting < len(tasks):  # every episode listed its tools and waits on its first call
        await asyncio.sleep(0.05)
    await asyncio.to_thread(container.compose, "stop", "--timeout", "2", "gateway")
    policy.hold = False
    policy.release.set()
    dropped = await batch
    await asyncio.to_thread(container.compose, "start", "gateway")
    back_s = await asyncio.to_thread(healthy, container)

    assert [t.status for t in dropped] == ["tool_server_down"] * len(tasks), [
        (t.status, t.error) for t in dropped
    ]
    assert all(not t.trainable() and t.reward is None for t in dropped)
    again = await runner.run_batch(router, tasks)
    assert [t.status for t in again] == ["ok"] * len(tasks), [(t.status, t.error) for t in again]
    assert sum(t.reward for t in again) == pytest.approx(sum(t.reward for t in warm))
    runner.close()
    after = await asyncio.to_thread(settled_resources, before)
    assert_flat(before, after, "GAIA container restarted")
    record(
        fault="GAIA gateway container stopped and started (Docker)",
        where="a batch of the sample's 10 episodes, each waiting on its first call",
        run=f"their tool calls failed fast; the container answered /health {back_s:.1f} s after its start; "
        "the next batch's 10 episodes all ok",
        steps="3 batches of 10",
        lost=f"{len(dropped)} (`tool_server_down`) of {len(tasks)} in flight",
        resources=f"{before} -> {after}",
    )
