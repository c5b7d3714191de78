"""AWorldWorkflow: AReaL's rollout workflow that runs an AWorld agent through our Episode.

AReaL calls `arun_episode(engine, data)` once per sample (it runs
`gconfig.n_samples` of them per task and concatenates the group). The agent's
LLM calls go to `engine.agenerate(ModelRequest)` with one sticky request id per
episode; the ledger's exact ids come back as AReaL's per-trajectory tensor dict
with batch dimension 1: input_ids, loss_mask, logprobs, versions,
attention_mask and rewards. A failed episode keeps its tokens with an all-zero
loss mask (ARCHITECTURE.md invariant 2).
"""

from __future__ import annotations

import uuid
from typing import Any

import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest
from areal.api.workflow_api import RolloutWorkflow

from aworld_train.aworld.agent_spec import load_agent_spec
from aworld_train.config import RolloutConfig
from aworld_train.models import load_tokenizer, stop_token_ids
from aworld_train.reward import RewardFunction
from aworld_train.rollout.chat import ChatRenderer
from aworld_train.rollout.codec import TASK_FIELD, SegmentSample, episode_samples, task_from_json
from aworld_train.rollout.episode import Episode, RolloutRuntime
from aworld_train.rollout.policy import Generation, SamplingParams
from aworld_train.rollout.trajectory import Task, Trajectory

# AReaL's stop reasons; a tool-call stop is a stop for the ledger.
_FINISH = {"stop": "stop", "tool_calls": "stop", "length": "length", "abort": "abort"}
# AReaL marks tokens the policy did not sample with version -1.
NOT_SAMPLED = -1


class ArealEnginePolicy:
    """PolicyClient over AReaL's inference engine; records each sampled token's weight version."""

    def __init__(self, engine, gconfig: GenerationHyperparameters, tokenizer=None) -> None:
        self.engine = engine
        self.gconfig = gconfig
        self.tokenizer = tokenizer
        self.rid = uuid.uuid4().hex  # sticky: the episode's turns reach the same server
        self.sampled: list[tuple[list[int], list[int]]] = []  # (ids, versions) per call

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        gconfig = self.gconfig.new(
            n_samples=1,
            max_new_tokens=sampling.max_new_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
        )
        request = ModelRequest(
            rid=self.rid, input_ids=list(prompt_ids), gconfig=gconfig, tokenizer=self.tokenizer
        )
        response = await self.engine.agenerate(request)
        ids = list(response.output_tokens)
        logprobs = [float(x) for x in response.output_logprobs]
        versions = [int(v) for v in response.output_versions]
        if not (len(ids) == len(logprobs) == len(versions)):
            raise RuntimeError(
                f"AReaL's engine returned {len(ids)} tokens, {len(logprobs)} logprobs and "
                f"{len(versions)} versions; the workflow needs one of each per sampled token"
            )
        self.sampled.append((ids, versions))
        return Generation(ids, logprobs, _FINISH.get(str(response.stop_reason), "stop"))  # type: ignore[arg-type]


def task_from_row(data: dict[str, Any]) -> Task:
    """The row our renderer wrote (areal/train.jsonl) back into a Task."""
    return task_from_json(data[TASK_FIELD])


def token_versions(sample: SegmentSample, sampled: list[tuple[list[int], list[int]]]) -> list[int]:
    """The weight version of every token of the sample; -1 where the policy did not sample it.

    Sampled tokens are exactly the ledger's mask-1 tokens in call order (invariant 1), so
    they are matched one by one against what the engine returned; a mismatch is a bug.
    The first segment's tokens come first in `sampled`; later segments are not trained."""
    queue = [(t, v) for ids, versions in sampled for t, v in zip(ids, versions, strict=True)]
    out = [NOT_SAMPLED] * len(sample.prompt_ids)
    position = 0
    for token, sampled_here in zip(sample.response_ids, sample.sampled_mask, strict=True):
        if not sampled_here:
            out.append(NOT_SAMPLED)
            continue
        if position >= len(queue) or queue[position][0] != token:
            raise RuntimeError("the ledger's sampled tokens differ from what AReaL's engine returned")
        out.append(queue[position][1])
        position += 1
    return out


def to_areal_batch(
    traj: Trajectory,
    sampled: list[tuple[list[int], list[int]]],
    prompt_fallback: list[int],
    pad_id: int,
    train_on_malformed: bool = False,
) -> dict[str, torch.Tensor]:
    """One trajectory as AReaL's trainer reads it: tensors of shape [1, L] plus rewards [1]."""
    samples = episode_samples(traj, train_on_malformed)
    sample, _ = samples.one_row()
    reward = samples.reward
    if sample is None:
        ids = (traj.segments[0].prompt_ids if traj.segments else list(prompt_fallback)) + [pad_id]
        loss_mask, logprobs, versions = [0] * len(ids), [0.0] * len(ids), [NOT_SAMPLED] * len(ids)
    else:
        ids = sample.prompt_ids + sample.response_ids
        loss_mask = [0] * len(sample.prompt_ids) + sample.response_mask
        logprobs = [0.0] * len(sample.prompt_ids) + sample.response_logprobs
        versions = token_versions(sample, sampled)
    row = {
        "input_ids": torch.tensor(ids, dtype=torch.int32),
        "loss_mask": torch.tensor(loss_mask, dtype=torch.int32),
        "logprobs": torch.tensor(logprobs, dtype=torch.float32),
        "versions": torch.tensor(versions, dtype=torch.int32),
        "attention_mask": torch.ones(len(ids), dtype=torch.bool),
        "rewards": torch.tensor(reward, dtype=torch.float32),
    }
    return {key: value.unsqueeze(0) for key, value in row.items()}


class AWorldWorkflow(RolloutWorkflow):
    """Constructed by AReaL from the workflow path and the kwargs in the run's workflow.yaml."""

    def __init__(
        self,
        spec_path: str,
        tokenizer: Any,
        gconfig: GenerationHyperparameters | dict[str, Any] | None = None,
        rollout: dict[str, Any] | None = None,
        reward: str | None = None,
        reward_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.spec = load_agent_spec(spec_path)
        self.tokenizer = load_tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer
        self.settings = RolloutConfig(**(rollout or {}))
        self.stop_ids = stop_token_ids(self.tokenizer)
        if gconfig is None:
            gconfig = GenerationHyperparameters()
        elif isinstance(gconfig, dict):
            gconfig = GenerationHyperparameters(**gconfig)
        self.gconfig = gconfig.new(stop_token_ids=list(self.stop_ids))
        self.reward = RewardFunction.load(reward, kwargs=reward_kwargs) if reward else None
        self.renderer = ChatRenderer(self.tokenizer, tool_block=self.settings.tool_block)
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else 0

    async def arun_episode(self, engine, data: dict[str, Any]) -> dict[str, torch.Tensor]:
        task = task_from_row(data)
        policy = ArealEnginePolicy(engine, self.gconfig, self.tokenizer)
        runtime = RolloutRuntime(policy, self.renderer, self.stop_ids, self.settings)
        traj = await Episode(self.spec, task, runtime, self.reward, episode_id=policy.rid).run()
        fallback = self.tokenizer.encode(
            task.user_turns[0] if task.user_turns else "", add_special_tokens=False
        )
        return to_areal_batch(traj, policy.sampled, fallback, self.pad_id, self.settings.train_on_malformed)
