"""A call to a tool the request does not offer (a name the policy invented) is the policy's own
mistake: the episode ends as malformed_tool_call, naming the tool and those offered, before any agent
sees the call, so no framework can turn it into a failed episode; the call is answered 410 with that
reason. The in-process AWorld path ends the same way. The run's rollout.train_on_malformed decides
whether it trains, at reward 0, and the token files and the viewer say so.

Driven by the `openai` and `anthropic` SDKs on each API, and end to end by a local run whose agent
is a plain `openai` SDK loop in its own process (examples/calculator_gateway/sdk_agent.py)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import anthropic
import openai
import pyarrow.parquet as pq
import pytest
from backend_support import calculator_reply
from gateway_api_support import ANTHROPIC_TOOLS, CHAT_TOOLS, RESPONSES_TOOLS
from gateway_support import SDKAgent, anthropic_client, openai_client
from viewer_support import scripted_logprobs

from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.policies.client import Generation, ScriptedPolicy
from aworld_train.rollout.samples.codec import episode_samples

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "calculator_gateway"
INVENTED = "add_minus_2_96"
INVENTED_CALL = f"<tool_call>\n{json.dumps({'name': INVENTED, 'arguments': {'a': 2, 'b': 96}})}\n</tool_call>"
TASK = Task("t", ["What is 2 + 96?"], ground_truth=98)
USER = {"role": "user", "content": "What is 2 + 96?"}


async def ask(api: str, session) -> openai.APIStatusError | anthropic.APIStatusError:
    """One call offering the calculate tool, on `api`, through its SDK; the error it is answered with."""
    if api == "messages":
        async with anthropic_client(session) as claude:
            with pytest.raises(anthropic.APIStatusError) as got:
                await claude.messages.create(model="m", max_tokens=64, messages=[USER], tools=ANTHROPIC_TOOLS)
            return got.value
    async with openai_client(session) as oai:
        with pytest.raises(openai.APIStatusError) as got:
            if api == "chat":
                await oai.chat.completions.create(model="m", messages=[USER], tools=CHAT_TOOLS)
            else:
                await oai.responses.create(model="m", input=USER["content"], tools=RESPONSES_TOOLS)
        return got.value


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
async def test_a_call_to_a_tool_not_offered_ends_the_episode_malformed_on_every_api(
    api, tokenizer, im_end, make_runtime
):
    policy = ScriptedPolicy(tokenizer, [INVENTED_CALL], im_end)
    got: dict = {}

    async def body(client, text: str, session) -> None:
        # the call outlives the agent's turn, which the episode's end cancels
        got["call"] = asyncio.ensure_future(ask(api, session))
        await asyncio.shield(got["call"])

    traj = await Episode(SDKAgent(body), TASK, make_runtime(policy)).run()
    error = await got["call"]
    assert traj.status == "malformed_tool_call"
    assert traj.error == f"the turn calls {INVENTED!r}, not among the call's tools (calculate)"
    # never passed on as a call: answered 410 with the episode's reason, and never run
    assert error.status_code == 410
    assert error.response.json()["error"]["message"] == (
        f"the episode ended as malformed_tool_call: {traj.error}; no more calls are answered"
    )
    assert traj.tool_calls == []
    # the invented call is the policy's sample, kept in the ledger for the loss to teach
    (segment,) = traj.segments
    assert [t for t, m in zip(segment.response_ids, segment.response_mask, strict=True) if m] == (
        policy.generations[0].token_ids
    )


async def test_the_in_process_aworld_path_ends_an_invented_call_the_same_way(
    tokenizer, im_end, calculator_spec, make_runtime
):
    """AWorld would answer the call with an error result ("Failed to execute add_minus_2_96") and go
    on to an ok episode; it never sees the call."""
    spec = calculator_spec.model_copy(update={"few_shot": []})
    policy = ScriptedPolicy(tokenizer, [INVENTED_CALL, "The answer is 98."], im_end)
    traj = await Episode(spec, TASK, make_runtime(policy)).run()
    assert traj.status == "malformed_tool_call"
    assert traj.error == f"the turn calls {INVENTED!r}, not among the call's tools (calculate, last_result)"
    assert traj.tool_calls == [] and len(policy.prompts) == 1


async def test_an_invented_call_trains_at_reward_0_only_with_train_on_malformed(
    tokenizer, im_end, make_runtime
):
    policy = ScriptedPolicy(tokenizer, [INVENTED_CALL], im_end)

    async def body(client, text: str, session) -> None:
        await client.chat.completions.create(model="m", messages=[USER], tools=CHAT_TOOLS)

    traj = await Episode(SDKAgent(body), TASK, make_runtime(policy)).run()
    assert traj.status == "malformed_tool_call" and traj.reward is None  # no reward function here
    trained, left_out = episode_samples(traj, train_on_malformed=True), episode_samples(traj, False)
    assert trained.trainable and trained.reward == 0.0
    assert any(trained.segments[0].response_mask)
    assert not left_out.trainable and not any(left_out.segments[0].response_mask)


class InventsOnce:
    """The tiny model's policy, scripted: the first episode to call invents a tool's name, the others
    call the calculator and answer with its result."""

    def __init__(self, policy, tokenizer) -> None:
        self.policy, self.tokenizer = policy, tokenizer
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.first_calls = 0

    def __getattr__(self, name):  # lock, pad_id, version, ...: the local policy's
        return getattr(self.policy, name)

    async def generate(self, prompt_ids, sampling) -> Generation:
        text = self.tokenizer.decode(prompt_ids)
        first_call = "<tool_response>" not in text[text.rindex("What is") :]
        self.first_calls += first_call
        reply = INVENTED_CALL if first_call and self.first_calls == 1 else calculator_reply(text)
        ids = self.tokenizer.encode(reply, add_special_tokens=False) + [self.end]
        return Generation(ids, scripted_logprobs(len(ids)), "stop", versions=[self.policy.version] * len(ids))


def run_config(run_dir: Path, model_dir: Path, train_on_malformed: bool) -> dict:
    return {
        "model": str(model_dir),
        "agent": f"{EXAMPLE / 'process_agents.py'}:sdk_agent",
        "algorithm": {"group_size": 2, "lr": 1e-4},
        "rollout": {
            "max_new_tokens": 48,
            "max_assistant_turns": 3,
            "tool_block": "never",
            "train_on_malformed": train_on_malformed,
        },
        "data": {"batch_size": 1},
        "reward": {"fn": "aworld_train.rewards.calculator:exact_answer"},
        "trainer": {
            "steps": 1,
            "save_every": 0,
            "eval_every": 0,
            "eval_before": False,
            "eval_after": False,
            "run_dir": str(run_dir),
        },
        "env": [{"name": "calculator"}],
    }


def invented_call_run(run_dir: Path, model_dir: Path, train_on_malformed: bool) -> Path:
    """One step of a local run (its agent an `openai` SDK loop in its own process, which raises on
    the 410) whose policy invents a tool's name in the first of its two episodes."""
    from aworld_train import AgentTrainer
    from aworld_train.engines.local import startup

    real = startup.local_runner

    def scripted_runner(*args, **kwargs):
        runner, policy = real(*args, **kwargs)
        return runner, InventsOnce(policy, kwargs["tokenizer"])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(startup, "local_runner", scripted_runner)
        patch.setenv("AWORLD_TRAIN_DTYPE", "float32")
        rows = [{"prompt": "What is 2 + 96?", "ground_truth": 98}]
        AgentTrainer(config=run_config(run_dir, model_dir, train_on_malformed), train_dataset=rows).train()
    return run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir) -> dict[bool, Path]:
    """A run for each rollout.train_on_malformed."""
    return {
        flag: invented_call_run(
            tmp_path_factory.mktemp(f"train-on-malformed-{flag}") / "run", tiny_model_dir, flag
        )
        for flag in (True, False)
    }


def step_rows(run_dir: Path) -> dict[str, dict]:
    """The run's one step's token-file rows, by status."""
    (part,) = (run_dir / "tokens" / "step_000001").glob("part-*.parquet")
    return {row["status"]: row for row in pq.read_table(part).to_pylist()}


NOTES = {
    True: "trained at reward 0 (rollout.train_on_malformed: true)",
    False: "left out of the loss and of its group's baseline (rollout.train_on_malformed: false)",
}


class NoTokenizer:
    def pieces(self, ids):
        return None

    def status(self):
        return {"ok": False, "reason": "not needed here"}


@pytest.mark.parametrize("train_on_malformed", [True, False])
def test_a_run_records_an_invented_call_as_malformed_and_trains_it_as_the_run_says(runs, train_on_malformed):
    """The token files keep the episode as malformed_tool_call naming the tool, with an advantage
    (trained) or none, as the run says; the viewer's episode says which."""
    from aworld_train.viewer.store import Run
    from aworld_train.viewer.views import episode_view

    episodes = step_rows(runs[train_on_malformed])
    assert set(episodes) == {"ok", "malformed_tool_call"}
    malformed = episodes["malformed_tool_call"]
    assert malformed["error"].startswith(f"the turn calls {INVENTED!r}, not among the call's tools (")
    assert malformed["reward"] == 0.0 and malformed["tool_calls"] == 0
    assert (malformed["advantage"] is not None) == train_on_malformed
    assert episodes["ok"]["reward"] == 1.0 and episodes["ok"]["advantage"] is not None

    view = episode_view(Run(runs[train_on_malformed]), NoTokenizer(), "step_000001", malformed["episode_id"])
    assert view["status"] == "malformed_tool_call" and INVENTED in view["error"]
    assert view["malformed"] == NOTES[train_on_malformed]


@pytest.mark.skipif(shutil.which("chromium") is None, reason="no system Chromium (apt-get install chromium)")
def test_the_viewer_shows_an_invented_call_as_malformed_and_whether_it_trained(runs):
    """`aworld-train view` over both runs, in Chromium: the episode's page names the malformed call
    and says whether the step trained it."""
    from playwright.sync_api import sync_playwright

    folders = [runs[True], runs[False]]
    process = subprocess.Popen(
        [sys.executable, "-m", "aworld_train.facade.cli", "view", *map(str, folders), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        url = re.search(r"http://127\.0\.0\.1:\d+/", process.stdout.readline()).group(0)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=shutil.which("chromium"), args=["--no-sandbox"]
            )
            for index, flag in enumerate((True, False)):
                episode = step_rows(folders[index])["malformed_tool_call"]["episode_id"]
                page = browser.new_page()  # a fresh page: the last one's episode is not this one's
                page.goto(f"{url}#/r/{index}/s/step_000001/e/{episode}")
                page.wait_for_selector("#episode-error")
                shown = page.inner_text("#episode-error")
                assert shown.startswith("malformed tool call the turn calls 'add_minus_2_96'"), shown
                assert page.inner_text("#episode-malformed") == NOTES[flag]
            browser.close()
    finally:
        process.terminate()
        process.wait(timeout=10)
