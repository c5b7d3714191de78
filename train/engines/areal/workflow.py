"""AWorldWorkflow: AReaL's rollout workflow that runs an AWorld agent through our Episode.

AReaL calls `arun_episode(engine, data)` once per task (the render sets its
`gconfig.n_samples` to 1): the workflow runs the task's group of `group_size`
episodes itself, so that GRPO's group baseline leaves failed episodes out
(ARCHITECTURE.md invariant 2). AReaL's own group normalisation takes no mask and
would count a failed episode as reward 0; the render turns it off, and each
trained row's reward is its group-normalised advantage. Failed episodes give no
row. Every ledger segment of a trained agent is a row (an agent that rewrites its history has
several), and each agent's advantage is computed once per episode against the same agent in the
other episodes of the group, then given to each of its rows; under `algorithm.advantage` gigpo or
discounted each turn of a row is a row of its own with the turn's advantage (engines/areal/rows.py).
The agent's
LLM calls go to `engine.agenerate(ModelRequest)` with one sticky request id per episode; the
ledger's exact ids come back as AReaL's tensor dict: input_ids, loss_mask, logprobs, versions,
attention_mask, rewards. Raw rewards and statuses go to AReaL's stats tracker (its rollout and
eval logs).

Evaluation (`group_baseline: False`, the held-out kwargs of workflow.yaml): each task `group_size`
(trainer.eval_k) times under each of `eval_seeds`, sample j under seed s drawing from
`derive_seed(s, task id, j)` as the local backend's evaluation does (seeds.py carries each call's
seed to the server), its tokens in the set `eval/<eval_set>` (before, step_N, after).
"""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from areal import workflow_context
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest
from areal.api.workflow_api import RolloutWorkflow
from areal.utils import stats_tracker
from areal.utils.data import concat_padded_tensors

from aworld_train.aworld.specs import load_agent_spec
from aworld_train.engines.areal.rows import NOT_SAMPLED, AgentRows, areal_rows, trained_rows
from aworld_train.engines.areal.seeds import SEED_KEY, carry_sampling_seeds
from aworld_train.evaluation.report import held_out_group
from aworld_train.inputs.reward import RewardFunction
from aworld_train.rollout.episodes.runner import EpisodeRunner
from aworld_train.rollout.episodes.settings import RolloutSettings
from aworld_train.rollout.episodes.trajectory import STATUSES, Task, Trajectory
from aworld_train.rollout.policies.client import Generation, SamplingParams, derive_seed
from aworld_train.rollout.policies.models import load_tokenizer
from aworld_train.rollout.policies.router import PolicyRouter
from aworld_train.rollout.samples.codec import TASK_FIELD, task_from_json
from aworld_train.rollout.samples.credit import Credit, turn_advantages
from aworld_train.rollout.samples.token_log import EpisodeNotes, step_set, write_episodes

# AReaL's stop reasons; a tool-call stop is a stop for the ledger.
_FINISH = {"stop": "stop", "tool_calls": "stop", "length": "length", "abort": "abort"}


class ArealEnginePolicy:
    """PolicyClient over AReaL's inference engine; each sampled token keeps AReaL's weight version."""

    def __init__(self, engine, gconfig: GenerationHyperparameters, tokenizer=None) -> None:
        self.engine = engine
        self.gconfig = gconfig
        self.tokenizer = tokenizer
        self.rid = uuid.uuid4().hex  # sticky: the episode's turns reach the same server
        # tokens per version as AReaL's engine returned them: the episode's record sets them beside
        # the versions its rows carry, which come through our ledger
        self.engine_versions: Counter[int] = Counter()

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        gconfig = self.gconfig.new(
            n_samples=1,
            max_new_tokens=sampling.max_new_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
        )
        # the call's seed (a held-out episode's), sent by AReaL's request builder (seeds.py)
        metadata = {} if sampling.seed is None else {SEED_KEY: sampling.seed}
        request = ModelRequest(
            rid=self.rid,
            input_ids=list(prompt_ids),
            gconfig=gconfig,
            tokenizer=self.tokenizer,
            metadata=metadata,
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
        self.engine_versions.update(versions)
        finish = _FINISH.get(str(response.stop_reason), "stop")
        return Generation(ids, logprobs, finish, versions=versions)  # type: ignore[arg-type]


def task_from_row(data: dict[str, Any]) -> Task:
    """The row our renderer wrote (areal/train.jsonl) back into a Task."""
    return task_from_json(data[TASK_FIELD])


@dataclass(frozen=True)
class Episode:
    trajectory: Trajectory
    units: list[AgentRows]  # each trained agent's rows (a row per segment)
    engine_versions: Counter[int]  # sampled tokens per version, as AReaL's engine returned them


# AReaL builds a workflow object for every task it submits (remote_inf_engine.py, _resolve_workflow):
# what the kwargs name is loaded once per process, not once per task.
@functools.lru_cache(maxsize=8)
def _spec(path: str):
    return load_agent_spec(path)


@functools.lru_cache(maxsize=8)
def _tokenizer(path: str):
    return load_tokenizer(path)


@functools.lru_cache(maxsize=8)
def _reward(reference: str, kwargs_json: str) -> RewardFunction:
    return RewardFunction.load(reference, kwargs=json.loads(kwargs_json))


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
        group_size: int = 1,
        group_baseline: bool = True,
        norm_by_std: bool = True,
        advantage: str = "grpo",
        gamma: float = 1.0,
        step_weight: float = 1.0,
        episodes_file: str | None = None,
        tokens_dir: str | None = None,
        eval_seeds: list[int] | None = None,
        eval_set: str | None = None,
    ) -> None:
        carry_sampling_seeds()
        self.group_size = group_size
        # evaluation: the held-out seeds (None: unseeded) and the token set its episodes go to
        self.eval_seeds = eval_seeds
        self.eval_set = eval_set
        # one JSON line per episode (status, raw reward, advantage, weight version): the run's record
        self.episodes_file = Path(episodes_file) if episodes_file else None
        # every episode's tokens, one part file per task group (rollout/samples/token_log.py)
        self.tokens_dir = Path(tokens_dir) if tokens_dir else None
        # training: rewards become group-normalised advantages; evaluation: raw rewards
        self.group_baseline = group_baseline
        self.credit = Credit(advantage, gamma, step_weight, norm_by_std)  # type: ignore[arg-type]
        self.tokenizer = _tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer
        self.settings = RolloutSettings(**(rollout or {}))
        self.reward = _reward(reward, json.dumps(reward_kwargs or {}, sort_keys=True)) if reward else None
        self.runner = EpisodeRunner(_spec(spec_path), self.tokenizer, self.settings, self.reward)
        if gconfig is None:
            gconfig = GenerationHyperparameters()
        elif isinstance(gconfig, dict):
            gconfig = GenerationHyperparameters(**gconfig)
        self.gconfig = gconfig.new(stop_token_ids=list(self.runner.stop_token_ids))
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else 0

    async def _episode(self, engine, task: Task, seed: int | None = None) -> Episode:
        policy = ArealEnginePolicy(engine, self.gconfig, self.tokenizer)
        # AReaL's actor is the run's one policy: this request's client, a router of one
        traj = await self.runner.run(PolicyRouter(policy), task, episode_id=policy.rid, seed=seed)
        fallback = self.tokenizer.encode(
            task.user_turns[0] if task.user_turns else "", add_special_tokens=False
        )
        units = areal_rows(
            traj,
            fallback,
            self.pad_id,
            self.settings.train_on_malformed,
            frozen_agents=self.settings.frozen_agents,
        )
        return Episode(traj, units, policy.engine_versions)

    async def arun_episode(self, engine, data: dict[str, Any]) -> dict[str, torch.Tensor] | None:
        """The task's group of episodes as one padded batch; None when no episode of it counts."""
        task = task_from_row(data)
        if not self.group_baseline:
            return await self.evaluate(engine, task)
        episodes = await asyncio.gather(*(self._episode(engine, task) for _ in range(self.group_size)))
        record_stats(episodes)
        trainable = [episode.trajectory.trainable(self.settings.train_on_malformed) for episode in episodes]
        kept = [unit for episode, ok in zip(episodes, trainable, strict=True) if ok for unit in episode.units]
        # per agent and episode (once, however many segments): against the same agent's units in
        # the group's other episodes
        per_turn = turn_advantages(
            self.credit.estimator,
            [list(unit.turns) for unit in kept],
            [unit.agent for unit in kept],
            self.credit.gamma,
            self.credit.step_weight,
            self.credit.norm_by_std,
        )
        credit = {id(unit): advantages for unit, advantages in zip(kept, per_turn, strict=True)}
        trained = {key: advantages[0] for key, advantages in credit.items()}
        self.write_episodes(episodes, [trained.get(id(episode.units[0])) for episode in episodes], "train")
        await self.write_tokens(task, episodes, credit, "train")
        if not kept:
            return None  # AReaL drops the task from this step, as it does a rejected one
        # grpo: one advantage for every turn, each segment's row as sampled; else a row per turn
        per_turn_rows = self.credit.estimator != "grpo"
        return concat_padded_tensors(
            [row for unit in kept for row in trained_rows(unit, credit[id(unit)], per_turn_rows)]
        )

    async def evaluate(self, engine, task: Task) -> dict[str, torch.Tensor]:
        """The task's held-out samples (`group_size` under each seed), each seed's in its own held-out
        group of the token files; an episode's first row carries its raw reward."""
        seeds = self.eval_seeds if self.eval_seeds is not None else [None]
        draws = [
            (seed, None if seed is None else derive_seed(seed, task.id, j))
            for seed in seeds
            for j in range(self.group_size)
        ]
        episodes = await asyncio.gather(*(self._episode(engine, task, draw) for _, draw in draws))
        record_stats(episodes)
        self.write_episodes(episodes, [None] * len(episodes), "eval")
        for seed in seeds:
            chunk = [episode for (own, _), episode in zip(draws, episodes, strict=True) if own == seed]
            await self.write_tokens(task, chunk, {}, "eval", held_out_group(task.id, seed))
        return concat_padded_tensors([episode.units[0].rows[0].tensors for episode in episodes])

    def write_episodes(self, episodes: list[Episode], advantages: list, phase: str) -> None:
        if self.episodes_file is None:
            return
        lines = []
        for episode, advantage in zip(episodes, advantages, strict=True):
            traj, units = episode.trajectory, episode.units
            record = {
                "phase": phase,
                "task_id": traj.task_id,
                "episode_id": traj.episode_id,
                "status": traj.status,
                "error": traj.error,
                "reward": traj.reward,
                "advantage": advantage,  # the reward AReaL trains the episode's first row with; None: no row
                "weight_version": episode_version(units),
                # the versions that sampled the episode: its oldest and newest, the sampled tokens
                # per version its rows give AReaL, and those AReaL's engine returned
                "min_version": traj.min_version,
                "max_version": traj.max_version,
                "versions": row_versions(units),
                "engine_versions": {str(v): n for v, n in sorted(episode.engine_versions.items())},
                "loss_tokens": sum(unit.loss_tokens for unit in units),
                "segments": sum(unit.trained_segments for unit in units),  # rows trained
                "num_turns": traj.num_turns,
                "agents": {unit.agent: unit.loss_tokens for unit in units if unit.agent},
            }
            lines.append(json.dumps(record) + "\n")
        self.episodes_file.parent.mkdir(parents=True, exist_ok=True)
        with self.episodes_file.open("a") as out:  # one write per group: lines of a group stay together
            out.write("".join(lines))

    async def write_tokens(
        self,
        task: Task,
        episodes: list[Episode],
        credit: dict[int, list[float]],
        phase: str,
        group: str | None = None,
    ) -> None:
        """The group's episodes as one part file of the run's token files. AReaL's workflow does
        not see the trainer's step: a training group goes to the step its newest weights were served
        in (version v: step v + 1); an evaluation to the set the trainer names (`eval_set`), else to
        the step of the weights that sampled it (version v: after step v, as the local backend's
        `eval/step_N`). The trainer's logprobs are computed later, and stay null."""
        if self.tokens_dir is None:
            return
        notes = token_notes(episodes, credit, group or task.id)
        newest = max((n.version_span[1] for n in notes if n.version_span), default=NOT_SAMPLED)
        step = newest + 1 if phase == "train" else max(newest, 0)
        name = step_set(step) if phase == "train" else f"eval/{self.eval_set or step_set(step)}"
        await asyncio.to_thread(
            write_episodes,
            self.tokens_dir,
            name,
            [episode.trajectory for episode in episodes],
            phase,
            step,
            notes,
        )


def token_notes(episodes: list[Episode], credit: dict[int, list[float]], group: str) -> list[EpisodeNotes]:
    """Each episode's group, its trained segments' advantages (each segment's first turn's, and
    each turn's reward and advantage) and its weight versions."""
    notes = []
    for episode in episodes:
        versions = _sampled_versions(episode.units)
        note = EpisodeNotes(group=group, version_span=(min(versions), max(versions)) if versions else None)
        for unit in episode.units:
            if id(unit) not in credit:
                continue
            rewards = [turn.reward for turn in unit.turns]
            for row in unit.rows:
                note.segment_advantages[row.segment] = row.turns_of(credit[id(unit)])[0]
                note.turn_rewards[row.segment] = row.turns_of(rewards)
                note.turn_advantages[row.segment] = row.turns_of(credit[id(unit)])
            if note.advantage is None:
                note.advantage = credit[id(unit)][0]
        notes.append(note)
    return notes


def _sampled_versions(units: list[AgentRows]) -> list[int]:
    """The weight version of every sampled token of the units' rows."""
    return [
        int(v)
        for unit in units
        for row in unit.rows
        for v in row.tensors["versions"][row.tensors["versions"] != NOT_SAMPLED].tolist()
    ]


def episode_version(units: list[AgentRows]) -> int:
    """The oldest weight version among an episode's sampled tokens (-1: none sampled)."""
    return min(_sampled_versions(units), default=NOT_SAMPLED)


def row_versions(units: list[AgentRows]) -> dict[str, int]:
    """The rows' sampled tokens per weight version (JSON keys: the versions as text)."""
    counts = Counter(_sampled_versions(units))
    return {str(v): n for v, n in sorted(counts.items())}


def record_stats(episodes: list[Episode]) -> None:
    """Each episode's raw reward, status, the segments it trains (none dropped: every segment is a
    row) and the weight version it was sampled with, and a team's per-agent reward and loss tokens,
    in AReaL's rollout (or eval) stats."""
    tracker = stats_tracker.get(workflow_context.stat_scope())
    for episode in episodes:
        traj, units = episode.trajectory, episode.units
        segments = float(sum(unit.trained_segments for unit in units))
        tracker.scalar(reward=float(traj.reward or 0.0), segments=segments, segments_dropped=0.0)
        # every status, 0 included: AReaL averages a key over the episodes that recorded it
        tracker.scalar(**{f"status/{status}": float(traj.status == status) for status in STATUSES})
        version = episode_version(units)
        if version != NOT_SAMPLED:
            tracker.scalar(weight_version=version)
        named = [unit for unit in units if unit.agent]
        if len(named) > 1:  # a team: each trained agent's reward and loss tokens
            for unit in named:
                tracker.scalar(
                    **{
                        f"agent/{unit.agent}/reward": unit.reward,
                        f"agent/{unit.agent}/loss_tokens": float(unit.loss_tokens),
                    }
                )
