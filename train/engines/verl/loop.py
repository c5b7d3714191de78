"""AWorldAgentLoop: verl's agent loop that runs an AWorld agent through our Episode.

verl instantiates it from the run's agent_loop.yaml for every sample. The
agent's LLM calls go to verl's `LLMServerClient.generate` with one sticky
request id per episode; the ledger's ids, mask and logprobs come back as
`AgentLoopOutput`, truncated consistently to `response_length`. A failed episode
yields an all-zero mask and a status, never invented text.
"""

from __future__ import annotations

import functools
import json
import logging
import uuid
from collections.abc import Collection
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

from aworld_train.aworld.specs import load_agent_spec
from aworld_train.engines.node_servers import node_server_urls
from aworld_train.engines.verl.turn_credit import TURNS_FIELD, segment_turns
from aworld_train.engines.verl.validation import episode_seed, is_validation, loop_settings
from aworld_train.evaluation.report import CORRECT
from aworld_train.inputs.reward import RewardFunction
from aworld_train.rollout.episodes.runner import EpisodeRunner
from aworld_train.rollout.episodes.settings import RolloutSettings
from aworld_train.rollout.episodes.trajectory import Task, Trajectory
from aworld_train.rollout.policies.client import Generation, SamplingParams
from aworld_train.rollout.policies.router import PolicyRouter
from aworld_train.rollout.samples.codec import (
    TASK_FIELD,
    SegmentSample,
    episode_samples,
    task_from_foreign_row,
    task_from_json,
)
from aworld_train.rollout.tokens.ledger import NO_VERSION

logger = logging.getLogger(__name__)

_FINISH = {"stop": "stop", "length": "length", "abort": "abort", "aborted": "abort"}


class VerlServerPolicy:
    """PolicyClient over verl's LLMServerClient: one request id for the whole episode.

    The server's `extra_fields` are kept across calls as verl's own ToolAgentLoop keeps them:
    the first call's, with `max_global_steps` moved on by later calls. verl's V1 trainer reads
    `min_global_steps`/`max_global_steps` (the weight versions an episode saw) from every output.

    Each call's tokens are stamped with its version (verl's `global_steps`). A call that verl's
    partial rollout resumed on newer weights (FullyAsyncLLMServerClient) reports only the span,
    not where it changed: its tokens are stamped NO_VERSION, and the span reaches verl all the same.
    """

    def __init__(self, server, base_params: dict[str, Any], stop_token_ids: list[int] | None = None) -> None:
        self.server = server
        self.request_id = uuid.uuid4().hex
        self.base_params = dict(base_params)
        # vLLM stops at the model's eos only: an end-of-turn token that is not eos must be named
        if stop_token_ids:
            self.base_params["stop_token_ids"] = list(stop_token_ids)
        self.extra_fields: dict[str, Any] = {}

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        params = {**self.base_params, "max_tokens": sampling.max_new_tokens, "logprobs": True}
        if sampling.seed is not None:  # a validation sample's call: its own draws (vLLM's `seed`)
            params["seed"] = sampling.seed
        out = await self.server.generate(
            request_id=self.request_id, prompt_ids=list(prompt_ids), sampling_params=params
        )
        fields = dict(getattr(out, "extra_fields", None) or {})
        if not self.extra_fields:
            self.extra_fields.update(fields)
        elif fields.get("max_global_steps") is not None:
            self.extra_fields["max_global_steps"] = fields["max_global_steps"]
        ids = list(out.token_ids)
        logprobs = list(out.log_probs) if out.log_probs is not None else None
        if logprobs is None or len(logprobs) != len(ids):
            raise RuntimeError(
                "verl's server returned no logprob per token; set actor_rollout_ref.rollout.calculate_log_probs=true"
            )
        finish = _FINISH.get(
            str(getattr(out, "stop_reason", None) or ""),
            "length" if len(ids) >= sampling.max_new_tokens else "stop",
        )
        return Generation(ids, logprobs, finish, versions=call_versions(fields, len(ids)))  # type: ignore[arg-type]


def call_versions(fields: dict[str, Any], n: int) -> list[int] | None:
    """The weight version of each of a call's `n` tokens from verl's server fields: the call's one
    version; NO_VERSION for each where its tokens span two (a resumed partial rollout); None where
    the server reports none."""
    low, high = fields.get("min_global_steps"), fields.get("max_global_steps")
    if low is None or high is None:
        return None
    return [int(low) if low == high else NO_VERSION] * n


def task_from_row(kwargs: dict[str, Any]) -> Task:
    """The dataset row verl passes to `run` back into our Task (ours, or a native verl row)."""
    extra = kwargs.get("extra_info") or {}
    if TASK_FIELD in extra:
        return task_from_json(extra[TASK_FIELD])
    return task_from_foreign_row(kwargs, kwargs.get("index", ""))


def _output(
    seg: SegmentSample,
    traj: Trajectory,
    *,
    reward: float,
    response_length: int,
    server_fields: dict[str, Any],
    turns: dict[str, Any] | None = None,
) -> AgentLoopOutput:
    response_ids = seg.response_ids[:response_length]
    logprobs = seg.response_logprobs[:response_length]
    mask = seg.response_mask[:response_length]
    truncated = len(seg.response_ids) > response_length
    # The same keys for every sample, whatever the reward function returned: verl stacks
    # reward_extra_info across the batch (the function's own extras travel as one JSON string).
    extra_info = {
        "status": traj.status,
        "num_tool_calls": len(traj.tool_calls),
        "tool_errors": sum(c.error for c in traj.tool_calls),
        "segments": len(traj.segments),
        "segments_dropped": 0,  # every engine trains every segment
        "agent": seg.agent,
        "truncated": truncated,
        "reward_extras": json.dumps(traj.reward_extras, default=str, sort_keys=True),
        # verl's validation metric: a session with no output (a failed episode) counts 0 for `acc` alone
        "acc": float(reward >= CORRECT),
    }
    policy_s = traj.timings.get("policy_s", 0.0)
    return AgentLoopOutput(
        prompt_ids=list(seg.prompt_ids),
        response_ids=list(response_ids),
        response_mask=list(mask),
        response_logprobs=list(logprobs),
        reward_score=reward,
        num_turns=traj.num_turns,
        metrics=AgentLoopMetrics(
            generate_sequences=policy_s, tool_calls=max(0.0, traj.timings.get("total_s", 0.0) - policy_s)
        ),
        extra_fields={
            **server_fields,
            "reward_extra_info": extra_info,
            "aworld_status": traj.status,
            # each turn's reward and state, for gigpo and discounted (engines/verl/advantages.py)
            TURNS_FIELD: _truncated(turns, response_length),
        },
    )


def _truncated(turns: dict[str, Any] | None, response_length: int) -> dict[str, Any] | None:
    """A segment's turns with `turn_of_token` cut where its response is."""
    if turns is None:
        return None
    return {**turns, "turn_of_token": turns["turn_of_token"][:response_length]}


def to_agent_loop_outputs(
    traj: Trajectory,
    *,
    response_length: int,
    train_on_malformed: bool,
    server_fields: dict[str, Any] | None = None,
    frozen_agents: Collection[str] = (),
) -> list[AgentLoopOutput]:
    """verl's V1 trainer: one output per segment (an agent that rewrites its history has several; a
    team's: per segment of every trained agent), all trained with the episode's advantage; a failed
    episode gives no output, so it has no loss and no place in its group's baseline.

    verl gives every output of a session the reward of its last one and computes GRPO over the
    sessions' last outputs (v1/agent_loop_tq.py, v1/utils.compute_advantage_for_multi_trajectories):
    an episode counts once in its group's baseline however many segments it has, and each output
    gets the advantage read at its session's last output's first trained token, so an output with no
    trained token within `response_length` is left out (it has nothing to train, and as the last it
    would give the session 0). A team's agents share the episode's advantage here; per-agent rewards
    and groups need the local or AReaL backend (a warning here says so), or an advantage per turn:
    every output carries its turns (`turn_credit.segment_turns`), from which gigpo and discounted
    compute each agent's own, once per agent and episode."""
    samples = episode_samples(traj, train_on_malformed, frozen_agents)
    if not samples.trainable:
        return []
    if samples.agent_rewards:
        _warn_agent_rewards_once()
    turns = segment_turns(samples, traj.episode_id)
    return [
        _output(
            seg,
            traj,
            reward=samples.reward,
            response_length=response_length,
            server_fields=server_fields or {},
            turns=turns.get(seg.index),
        )
        for seg in samples.segments
        if any(seg.response_mask[:response_length])
    ]


def plain(value: Any) -> Any:
    """What Hydra instantiated from agent_loop.yaml (ListConfig, DictConfig) as plain lists and dicts."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    return (
        OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig | ListConfig) else value
    )


@functools.cache
def _warn_agent_rewards_once() -> None:
    logger.warning(
        "the reward function returned agent_rewards: under algorithm.advantage: grpo verl trains every "
        "agent of an episode with the episode's reward; use gigpo or discounted, or backend: local or "
        "areal, for a reward per agent"
    )


class AWorldAgentLoop(AgentLoopBase):
    def __init__(
        self,
        *args,
        spec_path: str,
        rollout: dict[str, Any] | None = None,
        reward: str | None = None,
        reward_kwargs: dict[str, Any] | None = None,
        env_servers: list[dict[str, Any]] | None = None,
        run_dir: str | None = None,
        held_out: dict[str, Any] | None = None,
        **kwargs,
    ) -> None:
        kwargs.pop("tools", None)  # verl's own tool list: our agent brings its MCP tools
        super().__init__(*args, **kwargs)
        self.run_dir = run_dir
        if env_servers:  # this node's `env:` servers, before the agent resolves its URLs
            node_server_urls(plain(env_servers), run_dir or ".")
        verl_rollout = self.rollout_config
        self.response_length = int(verl_rollout.response_length)
        self.prompt_length = int(verl_rollout.prompt_length)
        settings = dict(rollout or {})
        settings["max_response_tokens"] = self.response_length
        settings["max_prompt_tokens"] = self.prompt_length
        # verl's lengths bound the episode; our own default must not cut it shorter
        settings["max_total_tokens"] = max(
            int(settings.get("max_total_tokens", 0)), self.prompt_length + self.response_length
        )
        self.settings = RolloutSettings(**settings)
        reward_fn = RewardFunction.load(reward, kwargs=reward_kwargs) if reward else None
        self.runner = EpisodeRunner(load_agent_spec(spec_path), self.tokenizer, self.settings, reward_fn)
        held = loop_settings(plain(held_out))
        self.held_out = held
        # validation episodes: the held-out turn limit and temperature, one runner for all of them
        self.held_runner = self.runner.with_settings(held.rollout(self.settings)) if held else self.runner

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> list[AgentLoopOutput]:
        task = task_from_row(kwargs)
        policy = VerlServerPolicy(self.server_manager, sampling_params, self.runner.stop_token_ids)
        runner = self.held_runner if is_validation(kwargs) else self.runner
        seed = episode_seed(kwargs, task.id, self.held_out)
        # verl's actor is the run's one policy: this request's client, a router of one
        traj = await runner.run(PolicyRouter(policy), task, episode_id=policy.request_id, seed=seed)
        # verl's V1 trainer takes every segment and leaves a failed episode out of its group
        # (ARCHITECTURE.md, the sample codec); the legacy trainer is refused at render
        outputs = to_agent_loop_outputs(
            traj,
            response_length=self.response_length,
            train_on_malformed=self.settings.train_on_malformed,
            server_fields=policy.extra_fields,
            frozen_agents=self.settings.frozen_agents,
        )
        from aworld_train.engines.verl.episodes import report_episode

        # the status reaches verl's step metrics even when the episode gives verl no output
        await report_episode(
            kwargs, traj, [out.extra_fields["reward_extra_info"]["agent"] for out in outputs]
        )
        if self.run_dir:  # the episode's tokens, in the run folder's token files
            from aworld_train.engines.verl.tokens import group_writer, record_episode

            n, val_n = int(self.rollout_config.n), int(self.rollout_config.val_kwargs.n)
            await record_episode(
                group_writer(self.run_dir), kwargs, traj, policy.extra_fields, train_n=n, val_n=val_n
            )
        return outputs
