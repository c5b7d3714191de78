"""Nothing lands in the user's working folder but the run folder, even when the user's script
imported AWorld before aworld_train (AWorld then opens ./logs, and writes failed LLM requests
to ./failed_requests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = r"""
import aworld.agents.llm_agent  # the user's script imports AWorld first
import asyncio, json, os, sys

assert os.path.isdir("logs"), "AWorld no longer opens ./logs at import: this test checks nothing"
from aworld_train.agents.calculator import build_agent
from aworld_train.aworld.specs import load_agent_spec
from aworld_train.inputs.config import RolloutSettings
from aworld_train.rollout.policies.models import load_tokenizer
from aworld_train.rollout.tokens.turns.stops import stop_token_ids
from aworld_train.rollout.tokens.templates.renderer import ChatRenderer
from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.runtime import RolloutRuntime
from aworld_train.rollout.policies.router import PolicyRouter
from aworld_train.rollout.policies.client import ScriptedPolicy
from aworld_train.rollout.episodes.trajectory import Task


class LostPolicy:
    async def generate(self, prompt_ids, sampling):
        raise RuntimeError("inference server went away")


tokenizer = load_tokenizer("embedded:smollm2-135m")
spec = load_agent_spec(build_agent(url=sys.argv[1]))
cfg = RolloutSettings(tool_block="never", max_assistant_turns=2)
renderer = ChatRenderer(tokenizer, tool_block="never")
im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
ok = ScriptedPolicy(tokenizer, ["The answer is 4."], im_end)
statuses = []
for policy in (LostPolicy(), ok):
    runtime = RolloutRuntime(PolicyRouter(policy), renderer, stop_token_ids(tokenizer), cfg)
    traj = asyncio.run(Episode(spec, Task("t", ["What is 2 + 2?"], ground_truth=4), runtime).run())
    statuses.append(traj.status)
from aworld.logs.util import logger
logger.error("a log record after the episodes")
print(json.dumps({"statuses": statuses, "left": sorted(os.listdir("."))}))
"""


def test_aworld_imported_first_writes_nothing_into_the_working_folder(tmp_path, calculator_server):
    # a user's shell: none of the variables importing aworld_train sets in this process
    env = {k: v for k, v in os.environ.items() if k not in ("AWORLD_LOG_PATH", "AWORLD_DISABLE_CONSOLE_LOG")}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, calculator_server.url],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["statuses"] == ["error", "ok"]
    assert result["left"] == [] and sorted(p.name for p in tmp_path.iterdir()) == []
