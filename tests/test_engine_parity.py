"""The three engines agree: one calculator task's group (two right, one wrong, one failed episode),
scripted the same way (tests/engine_parity.py), gives the same samples on the local backend
(its learner's `build_samples`), on verl (our agent loop through verl's registry, verl's own GRPO
advantages) and on AReaL (our workflow, AReaL's own PPOActor advantages, in AReaL's environment):
ids, masks, logprobs and advantages."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess

import pytest
from areal_support import AREAL_PYTHON, ROOT, needs_areal
from backend_support import trainer_for
from engine_parity import CONFIG, OUTCOMES, GroupScript, sample, verl_grpo_advantages

pytest.importorskip("verl.experimental.agent_loop.agent_loop")


def local_samples(trainer, tokenizer) -> list[dict]:
    from aworld_train.engines.local.samples import build_samples
    from aworld_train.engines.local.step_metrics import episode_notes
    from aworld_train.rollout.episodes.batch import run_episodes
    from aworld_train.rollout.episodes.runtime import RolloutRuntime
    from aworld_train.rollout.policies.client import Generation, ScriptedPolicy
    from aworld_train.rollout.policies.router import PolicyRouter
    from aworld_train.rollout.samples.token_log import write_episodes
    from aworld_train.rollout.tokens.templates.renderer import ChatRenderer
    from aworld_train.rollout.tokens.turns.stops import stop_token_ids

    script = GroupScript(tokenizer)

    def reply(prompt: list[int]) -> Generation:  # the first step's weights, version 0, as on verl
        ids, logprobs, *rest = script.reply(prompt)
        return Generation(ids, logprobs, *rest, versions=[0] * len(ids))

    policy = ScriptedPolicy(tokenizer, reply)
    rollout = trainer.config.rollout
    renderer = ChatRenderer(
        tokenizer, tool_block=rollout.tool_block, template_kwargs=rollout.chat_template_kwargs
    )
    runtime = RolloutRuntime(PolicyRouter(policy), renderer, stop_token_ids(tokenizer), rollout)
    task = trainer.train_tasks[0]
    trajs = asyncio.run(
        run_episodes(trainer.spec, [task], runtime, trainer.reward, samples_per_task=len(OUTCOMES))
    )
    groups = ["group"] * len(trajs)
    samples, advantages = build_samples(trajs, groups)
    # the token files, as LocalTraining writes them for a step
    notes = episode_notes(len(trajs), groups, samples, advantages)
    write_episodes(trainer.run_dir / "tokens", "step_000001", trajs, "train", 1, notes)
    return [
        sample(s.ids, [0] * s.prompt_len + s.mask, [0.0] * s.prompt_len + s.old_logprobs, s.advantage)
        for s in samples
    ]


def verl_samples(trainer, tokenizer) -> list[dict]:
    from verl.workers.rollout.replica import TokenOutput
    from verl_loop_support import instantiate_like_verl, row_kwargs

    script = GroupScript(tokenizer)

    class Server:  # verl's LLMServerClient.generate contract
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            ids, logprobs = script.reply(list(prompt_ids))
            steps = {"min_global_steps": 0, "max_global_steps": 0}
            return TokenOutput(token_ids=ids, log_probs=logprobs, stop_reason="completed", extra_fields=steps)

    run = trainer.render()
    outputs = []
    for _ in OUTCOMES:  # verl runs each session of the group through its own loop object
        loop = instantiate_like_verl(run, tokenizer, Server())
        kwargs = {**row_kwargs(run), "uid": "uid0", "global_steps": 1}  # what verl's V1 worker adds
        outputs.extend(asyncio.run(loop.run({"temperature": 1.0, "logprobs": True}, **kwargs)))
    advantages = verl_grpo_advantages(outputs, [f"uid0_{i}_0" for i in range(len(outputs))])
    return [
        sample(
            out.prompt_ids + out.response_ids,
            [0] * len(out.prompt_ids) + out.response_mask,
            [0.0] * len(out.prompt_ids) + out.response_logprobs,
            float(advantages[r][out.response_mask.index(1)]),
        )
        for r, out in enumerate(outputs)
    ]


def in_order(samples: list[dict]) -> list[dict]:
    return sorted(samples, key=lambda s: (s["advantage"], s["ids"]))


SEGMENT_KEYS = ("agent", "prompt_ids", "response_ids", "response_mask", "turn_starts", "sampled_logprobs")


def token_records(run_dir, advantages: bool = True) -> list[dict]:
    """A run folder's token files for the scripted step, in a common order: what every engine
    writes alike (verl computes advantages in its trainer, after the loop: it writes none)."""
    import pyarrow.parquet as pq

    rows = [
        r
        for p in sorted((run_dir / "tokens" / "step_000001").glob("part-*.parquet"))
        for r in pq.read_table(p).to_pylist()
    ]
    records = [
        {
            "status": r["status"],
            "reward": r["reward"],
            "step": r["step"],
            "versions": (r["version_min"], r["version_max"]),
            "advantage": round(r["advantage"], 5) if advantages and r["advantage"] is not None else None,
            "segments": [{k: seg[k] for k in SEGMENT_KEYS} for seg in r["segments"]],
        }
        for r in rows
    ]
    return sorted(records, key=lambda r: (r["status"], r["reward"] or 0.0, json.dumps(r["segments"])))


@pytest.fixture
def engines(tmp_path, calculator_server, monkeypatch, tokenizer):
    monkeypatch.setenv("CALCULATOR_MCP_URL", calculator_server.url)
    local = local_samples(trainer_for(tmp_path / "local", {**CONFIG, "backend": "local"}), tokenizer)
    verl = verl_samples(trainer_for(tmp_path / "verl", CONFIG), tokenizer)
    return {"local": local, "verl": verl}


def test_local_and_verl_give_the_same_samples(engines):
    local, verl = in_order(engines["local"]), in_order(engines["verl"])
    assert len(local) == len(OUTCOMES) - 1  # the failed episode gives no sample
    assert [s["advantage"] for s in local] == pytest.approx([-1.1547, 0.57735, 0.57735], abs=1e-4)
    assert local == verl


def test_local_and_verl_write_the_same_token_files(engines, tmp_path):
    local, verl = (
        token_records(tmp_path / "local" / "run", advantages=False),
        token_records(tmp_path / "verl" / "run"),
    )
    assert len(local) == len(OUTCOMES)  # the failed episode is kept too, with its status
    assert [r["status"] for r in local].count("error") == 1
    assert local == verl


@needs_areal
def test_areal_gives_the_same_samples(engines, tmp_path):
    run = trainer_for(tmp_path / "areal", {**CONFIG, "backend": "areal"}).render()
    out = tmp_path / "areal.json"
    done = subprocess.run(
        [AREAL_PYTHON, str(ROOT / "tests/engine_parity.py"), str(run.folder), str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT / "tests",
        env={**os.environ, "PYTHONPATH": str(ROOT / "tests")},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert in_order(json.loads(out.read_text())) == in_order(engines["local"])
    # AReaL's workflow wrote the group's token files (the weights of version 0: step 1), advantages too
    assert token_records(tmp_path / "areal" / "run") == token_records(tmp_path / "local" / "run")
