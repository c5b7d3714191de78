"""AgentGym environments: our TextCraft server against AgentGym's request and response shapes,
the bridge's client against the other shapes AgentGym servers use, and the bridge with real AWorld
agents: 64 concurrent episodes, a killed environment server, scripted agents that solve items."""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import pytest

from aworld_train.aworld.specs import load_agent_spec
from aworld_train.core.protocol import EPISODE_HEADER, TASK_HEADER, release_url
from aworld_train.env.agentgym import textcraft
from aworld_train.env.agentgym.client import AgentGymClient, EnvError, ServerDown
from aworld_train.env.agentgym.profiles import profile, split_actions
from aworld_train.env.agentgym.status import read_status
from aworld_train.env.launcher import start_server
from aworld_train.inputs.reward import RewardFunction
from aworld_train.rollout.episodes.batch import run_episodes
from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.policies.client import ScriptedPolicy

REWARD = RewardFunction.load("aworld_train.rewards.agentgym:env_reward")


def base(server) -> str:
    return f"http://{server.host}:{server.port}"


@pytest.fixture(scope="module")
def textcraft_server():
    server = start_server("agentgym-textcraft")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def bridge(textcraft_server):
    server = start_server(
        "agentgym", env={"AGENTGYM_ENV": "textcraft", "AGENTGYM_SERVER": base(textcraft_server)}
    )
    yield server
    server.stop()


# ---- our server speaks AgentGym's protocol -------------------------------------------------
def test_textcraft_server_answers_in_agentgym_shapes(textcraft_server):
    with httpx.Client(base_url=base(textcraft_server), timeout=10) as http:
        assert "TextCraft" in http.get("/").json()
        created = http.post("/create", json={}).json()
        env_id = created["id"]
        assert isinstance(env_id, int)
        reset = http.post("/reset", json={"id": env_id, "data_idx": 3}).json()
        assert set(reset) == {"id", "observation", "reward", "done"} and reset["done"] is False
        assert (
            reset["observation"].startswith("Crafting commands:\n")
            and "\n\nGoal: craft " in reset["observation"]
        )
        step = http.post("/step", json={"id": env_id, "action": "inventory"}).json()
        assert step == {
            "observation": "Inventory: You are not carrying anything.",
            "reward": 0.0,
            "done": False,
        }
        bad = http.post("/step", json={"id": env_id, "action": "dance"}).json()
        assert bad["observation"] == "Could not execute dance" and bad["reward"] == 0.0
        assert http.get("/observation", params={"id": env_id}).json() == "Could not execute dance"
        assert http.get("/detail", params={"id": env_id}).json()["data_idx"] == 3
        # errors are HTTP 200 with {"error": ...}, as AgentGym's servers answer them
        missing = http.post("/step", json={"id": 10**6, "action": "inventory"})
        assert missing.status_code == 200 and "not valid" in missing.json()["error"]
        assert http.post("/close", json={"id": env_id}).json() is True
        assert http.post("/close", json={"id": env_id}).json() is False


def test_task_lists_convert_with_each_items_task_read_from_the_server(textcraft_server, tmp_path):
    from aworld_train.env.agentgym.data import convert

    listing = tmp_path / "textcraft_test.json"
    listing.write_text(
        json.dumps([{"item_id": "textcraft_3", "conversations": []}, {"item_id": "textcraft_200"}])
    )
    assert convert(listing, "textcraft", tmp_path / "rows.jsonl", server=base(textcraft_server)) == {
        "rows": 2
    }
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [r["prompt"] for r in rows] == [textcraft.TextCraftWorld().reset(i) for i in (3, 200)]
    assert httpx.get(f"{base(textcraft_server)}/health").json()["open"] == 0  # closed after reading


def test_every_item_is_solvable_and_its_goal_is_stable():
    for item in (0, 3, 100, 300, 543):
        world = textcraft.TextCraftWorld()
        instruction = world.reset(item)
        assert instruction == textcraft.TextCraftWorld().reset(item)  # same item, same task
        assert instruction.endswith(f"Goal: craft {textcraft.name_of(textcraft.goal_of(item))}.")
        results = [world.step(a) for a in textcraft.plan(item)]
        assert results[-1][1:] == (1.0, True) and all(r[1:] == (0.0, False) for r in results[:-1])


# ---- the client absorbs the other shapes ---------------------------------------------------
def _env_idx_server(calls: list, fail_first: int = 0):
    """AgentGym's SQLGym/WebShop shapes: /create answers a bare id, requests carry `env_idx`,
    /reset answers no observation (read from /observation), /step answers `state`."""
    state = {"failures": fail_first}

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}") if request.method == "POST" else dict(request.url.params)
        calls.append((request.url.path, body))
        if state["failures"]:
            state["failures"] -= 1
            return httpx.Response(503, text="busy")
        if request.url.path == "/create":
            return httpx.Response(200, json=7)
        if request.url.path == "/reset":
            return httpx.Response(200, json=[None, "reset"])  # WebShop's /reset answers a list
        if request.url.path == "/observation":
            return httpx.Response(200, json="Question 5: how many rows?")
        if request.url.path == "/step":
            if body["action"] == "bad":
                return httpx.Response(200, json={"error": "SQL syntax error"})
            return httpx.Response(200, json={"state": "3", "reward": 1.0, "done": True})
        return httpx.Response(200, json=True)

    return httpx.MockTransport(handle)


async def test_client_speaks_env_idx_servers_and_retries_transient_failures():
    calls: list = []
    client = AgentGymClient("http://sqlgym", profile("sqlgym"), backoff_s=0.01)
    client._client = httpx.AsyncClient(
        base_url="http://sqlgym", transport=_env_idx_server(calls, fail_first=2)
    )
    env_id, field = await client.create()  # two 503s first, then the answer
    assert (env_id, field) == (7, "env_idx")
    first = await client.reset(env_id, field, 5)
    assert first.observation == "Question 5: how many rows?"
    assert ("/reset", {"env_idx": 7, "item_id": 5}) in calls and ("/observation", {"env_idx": "7"}) in calls
    step = await client.step(env_id, field, "SELECT 3")
    assert (step.observation, step.reward, step.done) == ("3", 1.0, True)
    with pytest.raises(EnvError, match="SQL syntax error"):  # HTTP 200 {"error": ...}
        await client.step(env_id, field, "bad")
    assert [c[0] for c in calls].count("/create") == 3
    await client.aclose()


async def test_a_step_is_never_sent_twice_and_a_dead_server_is_server_down():
    calls: list = []
    client = AgentGymClient("http://x", profile("textcraft"), backoff_s=0.01, retries=2)
    client._client = httpx.AsyncClient(base_url="http://x", transport=_env_idx_server(calls, fail_first=1))
    with pytest.raises(EnvError, match="503"):
        await client.step(1, "id", "inventory")
    assert len(calls) == 1
    dead = AgentGymClient("http://127.0.0.1:9", profile("textcraft"), backoff_s=0.01, retries=2)
    with pytest.raises(ServerDown, match="after 3 tries"):
        await dead.create()
    await dead.aclose()


async def test_babyai_server_and_bridge_with_a_scripted_agent():
    """BabyAI on minigrid, through the bridge: its actions are listed, and walking to the red
    ball solves the first levels (item i: level i % 40, seed i // 40, as AgentGym maps them)."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    env_server = start_server("agentgym-babyai")
    bridge = start_server("agentgym", env={"AGENTGYM_ENV": "babyai", "AGENTGYM_SERVER": base(env_server)})
    try:
        with httpx.Client(base_url=base(env_server), timeout=30) as http:
            env_id = http.post("/create", json={}).json()["id"]
            reset = http.post("/reset", json={"id": env_id, "data_idx": 0}).json()
            assert reset["observation"].startswith("Your goal: go to the red ball\n")
            assert '"go to red ball 1"' in reset["observation"].splitlines()[-1]
            assert http.post("/close", json={"id": env_id}).json() is True
        for item in (0, 1, 41):
            headers = {EPISODE_HEADER: f"babyai-{item}", TASK_HEADER: f"babyai_{item}"}
            async with streamablehttp_client(bridge.url, headers=headers) as (read, write, _):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    tools = {t.name for t in (await session.list_tools()).tools}
                    assert tools == {"act", "instruction", "available_actions"}
                    assert (
                        "Available actions"
                        not in (await session.call_tool("instruction", {})).content[0].text
                    )
                    for _ in range(6):
                        actions = (
                            (await session.call_tool("available_actions", {})).content[0].text.splitlines()
                        )
                        action = "go to red ball 1" if "go to red ball 1" in actions else "turn left"
                        result = (await session.call_tool("act", {"action": action})).content[0].text
                        if read_status(result):
                            break
                    assert read_status(result) == (1.0, True), result
    finally:
        bridge.stop()
        env_server.stop()


def test_only_the_bridge_takes_env_and_server_options(capsys):
    from aworld_train.facade.cli import main

    assert main(["env", "up", "calculator", "--env", "textcraft"]) == 2
    assert "takes no --env" in capsys.readouterr().err


def test_babyai_actions_line_and_other_profiles():
    text, actions = split_actions('You see a red ball.\nAvailable actions: ["turn left", "go to red ball 1"]')
    assert text == "You see a red ball." and actions == ["turn left", "go to red ball 1"]
    assert profile("babyai").reward_keys[0] == "score" and profile("webshop").reset_field == "session_id"
    assert profile("some-new-env").id_field is None  # read from what /create answers


# ---- the bridge, with MCP clients and with AWorld agents -----------------------------------
async def _episode_over_mcp(url: str, item: int) -> dict:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    episode = f"concurrent-{item}"
    headers = {EPISODE_HEADER: episode, TASK_HEADER: f"textcraft_{item}"}
    async with streamablehttp_client(url, headers=headers) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name for t in (await session.list_tools()).tools}
            instruction = (await session.call_tool("instruction", {})).content[0].text
            results = []
            for action in textcraft.plan(item):
                results.append((await session.call_tool("act", {"action": action})).content[0].text)
                if len(results) == 1:
                    inventory = (await session.call_tool("act", {"action": "inventory"})).content[0].text
    async with httpx.AsyncClient(timeout=30) as http:  # 2 shared cores: no latency test here
        released = (await http.delete(release_url(url, episode))).json()
    return {
        "tools": tools,
        "instruction": instruction,
        "results": results,
        "inventory": inventory,
        **released,
    }


async def test_64_concurrent_episodes_on_one_bridge_do_not_cross_talk(bridge, textcraft_server):
    # 64 different goals of 2 to 5 actions each (a few hundred tool calls in all)
    items = [i for i in range(0, 544, 3) if len(textcraft.plan(i)) <= 5][:64]
    assert len(items) == 64
    outcomes = await asyncio.gather(*(_episode_over_mcp(bridge.url, item) for item in items))
    for item, out in zip(items, outcomes, strict=True):
        assert out["tools"] == {"act", "instruction"}  # TextCraft lists no actions
        assert out["instruction"] == textcraft.TextCraftWorld().reset(item)
        first = textcraft.plan(item)[0]  # `get N X`: the inventory holds exactly that, nothing else's
        count, name = re.fullmatch(r"get (\d+) (.+)", first).groups()
        assert out["inventory"] == f"Inventory: [{name}] ({count})"
        assert read_status(out["results"][-1]) == (1.0, True)
        assert all(read_status(r) is None for r in out["results"][:-1])
        assert out["closed_environments"] == 1
    await _all_closed(textcraft_server)  # every episode's environment closed on release


async def _all_closed(env_server, within_s: float = 30.0) -> None:
    """The bridge closes released environments in the background: wait until none is open."""
    deadline = asyncio.get_running_loop().time() + within_s
    while (opened := httpx.get(f"{base(env_server)}/health").json()["open"]) and (
        asyncio.get_running_loop().time() < deadline
    ):
        await asyncio.sleep(0.2)
    assert opened == 0


def _solver(tokenizer, item_of):
    """A scripted agent: read the goal from the prompt, act the plan, one action per turn."""

    def step(prompt_ids: list[int]) -> str:
        text = tokenizer.decode(prompt_ids)
        item = item_of(text)
        done = len(re.findall(r"<tool_response>", text))
        actions = textcraft.plan(item)
        if done >= len(actions):
            return "The item is crafted."
        payload = json.dumps({"name": "act", "arguments": {"action": actions[done]}})
        return f"<tool_call>\n{payload}\n</tool_call>"

    return step


def _item_of_prompt(text: str) -> int:
    return int(re.findall(r"Item (\d+):", text)[-1])


@pytest.fixture(scope="module")
def agentgym_spec(bridge):
    from aworld_train.agents.agentgym import build_textcraft_agent

    return load_agent_spec(build_textcraft_agent(url=bridge.url)).model_copy(update={"few_shot": []})


async def test_scripted_agents_that_solve_known_items_get_reward_1(
    tokenizer, im_end, agentgym_spec, make_runtime, textcraft_server
):
    items = [3, 130, 200, 430]  # depth 1, 2, 2 and 3 goals: 2, 3, 7 and 12 actions
    tasks = [Task(f"textcraft_{i}", [f"Item {i}: {textcraft.TextCraftWorld().reset(i)}"]) for i in items]
    policy = ScriptedPolicy(tokenizer, _solver(tokenizer, _item_of_prompt), im_end)
    runtime = make_runtime(policy, max_assistant_turns=20, concurrency=4, max_total_tokens=8192)
    trajs = await run_episodes(agentgym_spec, tasks, runtime, REWARD)
    for item, traj in zip(items, trajs, strict=True):
        assert traj.status == "ok", traj.error
        assert traj.reward == 1.0 and traj.reward_extras["success"] == 1.0
        assert traj.reward_extras["steps"] == len(textcraft.plan(item))
    # an agent that stops early gets the environment's 0
    lazy = ScriptedPolicy(tokenizer, ["I give up."], im_end)
    traj = await Episode(agentgym_spec, tasks[0], make_runtime(lazy), REWARD).run()
    assert traj.status == "ok" and traj.reward == 0.0 and traj.reward_extras["done"] == 0.0
    await _all_closed(textcraft_server)  # the episodes released their environments when they ended


async def test_a_killed_environment_server_ends_the_episode_as_tool_server_down(
    tokenizer, im_end, make_runtime
):
    from aworld_train.agents.agentgym import build_textcraft_agent

    env_server = start_server("agentgym-textcraft")
    bridge = start_server("agentgym", env={"AGENTGYM_ENV": "textcraft", "AGENTGYM_SERVER": base(env_server)})
    try:
        spec = load_agent_spec(build_textcraft_agent(url=bridge.url)).model_copy(update={"few_shot": []})
        killed = asyncio.Event()

        def step(prompt_ids: list[int]) -> str:
            text = tokenizer.decode(prompt_ids)
            if "<tool_response>" in text and not killed.is_set():
                env_server.kill()  # after the first action: the environment server dies mid-episode
                killed.set()
            payload = json.dumps({"name": "act", "arguments": {"action": "get 1 birch logs"}})
            return f"<tool_call>\n{payload}\n</tool_call>"

        policy = ScriptedPolicy(tokenizer, step, im_end)
        runtime = make_runtime(policy, max_assistant_turns=5, tool_timeout_s=30, episode_timeout_s=60)
        traj = await Episode(spec, Task("textcraft_3", ["Item 3"]), runtime, REWARD).run()
        assert killed.is_set() and traj.tool_calls[0].result == "Got 1 birch logs"
        assert traj.status == "tool_server_down" and not traj.trainable(), traj.error
        assert "did not answer" in traj.error and traj.reward is None
    finally:
        bridge.stop()
        env_server.stop()
