"""backend: local: one process, a transformers model on CPU or one GPU, GRPO over real AWorld episodes."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import random
import resource
import shlex
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import aworld_train.engines.local.lora as lora
from aworld_train.core.atomic_files import complete_folder, write_text
from aworld_train.core.errors import ConfigError, RunCannotLearn, RunStoppedByDisk, no_checkpoint_to_resume
from aworld_train.engines.local.async_rollout import GroupStream, Taken
from aworld_train.engines.local.learner import GRPOLearner, Sample, build_samples
from aworld_train.engines.local.run_folder import RunFolder
from aworld_train.engines.logprob_mismatch import mismatch_text, mismatch_warning, with_warning
from aworld_train.evaluation.report import CORRECT, EvalReport, evaluate
from aworld_train.prerun.servers import running_envs
from aworld_train.rollout.episodes.runner import local_runner
from aworld_train.rollout.episodes.trajectory import Task, Trajectory
from aworld_train.rollout.policies.client import derive_seed
from aworld_train.rollout.samples.agent_stats import agent_metrics
from aworld_train.rollout.samples.failure_streak import FailureStreak, TrainedSoFar
from aworld_train.rollout.samples.token_log import EpisodeNotes, step_set

if TYPE_CHECKING:
    from aworld_train.inputs.run import RunInputs

console = Console(stderr=True)


def batch_for_step(tasks: list[Task], step: int, batch_size: int, seed: int) -> list[Task]:
    """Deterministic batches: epoch e is a seeded shuffle; a resumed run sees the same batches."""
    out = []
    for slot in range(step * batch_size, (step + 1) * batch_size):
        epoch, index = divmod(slot, len(tasks))
        order = list(range(len(tasks)))
        random.Random(seed * 1_000_003 + epoch).shuffle(order)
        out.append(tasks[order[index]])
    return out


def rollout_metrics(trajs: list[Trajectory], train_on_malformed: bool = False) -> dict[str, Any]:
    n = max(len(trajs), 1)
    rewards = [t.reward or 0.0 for t in trajs]
    response_tokens = [sum(sum(s.response_mask) for s in t.segments) for t in trajs]
    return {
        "reward_mean": sum(rewards) / n,
        "success_rate": sum(r >= CORRECT for r in rewards) / n,
        "tool_call_rate": sum(t.called_tool for t in trajs) / n,
        "turns_mean": sum(t.num_turns for t in trajs) / n,
        "sampled_tokens_mean": sum(response_tokens) / n,
        # segments begun because an agent's history stopped extending its ledger
        "history_rewrites_mean": sum(t.history_rewrites for t in trajs) / n,
        "forced_calls_mean": sum(t.forced_calls for t in trajs) / n,
        "constrained_tokens_mean": sum(t.constrained_tokens for t in trajs) / n,
        "episode_s_mean": statistics.fmean(t.timings.get("total_s", 0.0) for t in trajs) if trajs else 0.0,
        "statuses": dict(Counter(t.status for t in trajs)),
        "trainable_rate": sum(t.trainable(train_on_malformed) for t in trajs) / n,
        **agent_metrics(trajs),
    }


def episode_notes(
    count: int, groups: list[str], samples: list[Sample], advantages: list[float]
) -> list[EpisodeNotes]:
    """What the token files keep of a step beyond its trajectories: each episode's group, its
    advantage (None: not trained) and each trained segment's, and the learner's logprobs."""
    notes = [EpisodeNotes(group=groups[i]) for i in range(count)]
    for sample in samples:
        if sample.origin is None:
            continue
        episode, segment = sample.origin
        note = notes[episode]
        note.advantage = advantages[episode]
        note.segment_advantages[segment] = sample.advantage
        if sample.trainer_logprobs is not None:
            note.trainer_logprobs[segment] = sample.trainer_logprobs
    return notes


def staleness_metrics(taken: Taken, version: int) -> dict[str, float]:
    """Per trained episode, the versions its oldest token lags the weights it trains; the groups
    dropped as stale."""
    behind = [version - t.min_version for t in taken.trajectories if t.min_version is not None]
    return {
        "staleness_mean": statistics.fmean(behind) if behind else 0.0,
        "staleness_max": float(max(behind, default=0)),
        "dropped_stale": float(len(taken.dropped)),
    }


def stale_example(taken: Taken, version: int) -> str:
    """The all-stale step's figures: its groups and how far behind the oldest was."""
    oldest = min((g.oldest_version for g in taken.dropped if g.oldest_version is not None), default=version)
    return f"{len(taken.dropped)} groups dropped, up to {version - oldest} versions behind the weights' {version}"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class LocalTraining:
    def __init__(self, inputs: RunInputs, resume: bool = False) -> None:
        from aworld_train.rollout.episodes.template_check import require_usable_template, template_report
        from aworld_train.rollout.policies.models import load_model, load_tokenizer

        self.inputs = inputs
        self.cfg = inputs.config
        self.folder = RunFolder(inputs.run_dir)
        self.start_step = 0
        self.envs = None  # the env: servers' supervisor while the run runs
        latest = self.folder.latest_checkpoint() if resume else None
        if resume and latest is None:  # before any model loads
            raise ConfigError(
                no_checkpoint_to_resume(self.folder.path / "checkpoints") + _skipped(self.folder)
            )
        lora_settings = self.cfg.algorithm.lora
        if latest:  # a checkpoint resumes only the kind of training that saved it
            if lora_settings is None and lora.has_adapter(latest[1]):
                raise ConfigError(
                    f"{latest[1]} holds a LoRA adapter: the run trained with algorithm.lora; "
                    "resume it with the same algorithm.lora settings"
                )
            if lora_settings is not None:
                lora.require_same_settings(latest[1], lora_settings)  # and refuses a full-weight checkpoint
        # a LoRA run resumes its adapter on the base; a full-weight run resumes the saved weights
        model_source = str(latest[1]) if latest and lora_settings is None else self.cfg.model
        torch.manual_seed(self.cfg.trainer.seed)
        self.tokenizer = load_tokenizer(str(latest[1]) if latest else self.cfg.model)
        template = template_report(self.tokenizer, self.cfg.rollout)
        require_usable_template(template, self.cfg.model)  # before the model loads
        console.print(f"chat template: {template.line()}")
        self.model = load_model(model_source)
        ref = None
        if lora_settings is not None:
            # the adapter trains, the base stays; the KL reference is the base (adapter switched off)
            self.model = (
                lora.load(self.model, latest[1]) if latest else lora.attach(self.model, lora_settings)
            )
            console.print(f"LoRA: {lora.trainable_line(self.model)}")
        elif self.cfg.algorithm.kl_coef > 0:
            ref = load_model(self.cfg.model)
            ref.eval().requires_grad_(False)
        self.model.eval()
        self.runner, self.policy = local_runner(
            inputs.spec,
            self.cfg.model,
            self.cfg.rollout,
            inputs.reward,
            model=self.model,
            tokenizer=self.tokenizer,
        )
        self.learner = GRPOLearner(
            self.model,
            self.cfg.algorithm,
            self.cfg.rollout.temperature,
            self.policy.pad_id,
            ref,
            lock=self.policy.weights_update,  # each update is a new weight version
        )
        self.stream: GroupStream | None = None
        self.failures = FailureStreak(self.cfg.trainer.stop_after_failed_steps)
        self.trained = TrainedSoFar()
        if latest:
            state = torch.load(latest[1] / "trainer_state.pt", weights_only=False)
            self.learner.load_state_dict(state["learner"])
            self.start_step = state["step"]
            self.policy.version = state.get("version", self.start_step)
            restore_rng(state.get("rng"))
            self.failures.load(state.get("failures"))
            self.trained.load(state.get("trained"))
            # one line each, whatever the width: a log is read with grep
            console.print(
                f"resuming from {latest[1]} (step {self.start_step}){_skipped(self.folder)}", soft_wrap=True
            )
            removed = self.folder.rewind(self.start_step)
            if removed:
                console.print(
                    f"removed what steps after {self.start_step} left: {', '.join(removed)}", soft_wrap=True
                )
        write_text(self.folder.path / "config.yaml", self.cfg.render())
        inputs.spec.write(self.folder.path / "agent_spec.yaml")

    @property
    def asynchronous(self) -> bool:
        """max_staleness > 0: groups are sampled in a thread of their own while the learner trains."""
        return self.cfg.algorithm.max_staleness > 0

    # -- pieces ------------------------------------------------------------------
    def evaluate(self, name: str, step: int) -> EvalReport:
        episodes = evaluate(self.runner, self.policy, self.inputs.test_tasks, description=f"eval ({name})")
        # while groups are sampled in the background the policy serves their loop alone
        report = self.stream.run(episodes) if self.stream is not None else asyncio.run(episodes)
        self.folder.write_trajectories(f"eval/{name}", report.trajectories)
        self.folder.write_tokens(f"eval/{name}", report.trajectories, "eval", step)
        self.folder.log(step, report.summary(), prefix="eval")
        console.print(f"[bold]held-out ({name}, step {step}):[/bold] {report.text()}")
        return report

    def save(self, step: int, final: bool = False) -> Path:
        """The checkpoint of `step`: written as step_N.partial, its completion marker last, then
        renamed (atomic_files.complete_folder); a save cut short is never taken for a checkpoint.
        A LoRA run saves its adapter; its `final` checkpoint also holds the merged model."""
        path = self.folder.checkpoint_dir(step)
        state = {
            "step": step,
            "version": self.policy.version,
            "learner": self.learner.state_dict(),
            "rng": rng_state(),
            "failures": self.failures.state(),
            "trained": self.trained.state(),
        }
        try:
            with complete_folder(path, step=step) as tmp:
                with self.policy.lock:
                    if self.cfg.algorithm.lora is None:
                        self.model.save_pretrained(tmp)
                    else:
                        lora.save_adapter(self.model, tmp)
                self.tokenizer.save_pretrained(tmp)
                if final and self.cfg.algorithm.lora is not None:
                    # in the dtype it trained in
                    dtype = self.model.get_base_model().dtype
                    lora.export_merged(self.cfg.model, tmp, tmp, self.tokenizer, dtype)
                # through a Python file: torch's own writer reports a full disk without its errno
                with (tmp / "trainer_state.pt").open("wb") as f:
                    torch.save(state, f)
        except Exception as exc:
            if disk_full(exc) is not None:
                raise disk_error(exc, f"saving checkpoint {path}", self.folder) from exc
            raise
        return path

    def step_seed(self, step: int) -> int:
        # each step samples under its own seed: a resumed run draws what the uninterrupted one would
        return derive_seed(self.cfg.trainer.seed, "step", step)

    async def sample_group(self, index: int, limit: asyncio.Semaphore) -> list[Trajectory]:
        """Group `index` of the run's stream: the task the synchronous loop would give that slot
        of its step, sampled under that step's seed."""
        batch = self.cfg.data.batch_size
        step, slot = divmod(index, batch)
        task = batch_for_step(self.inputs.train_tasks, step, batch, self.cfg.trainer.seed)[slot]
        return await self.runner.run_batch(
            self.policy, [task], self.cfg.algorithm.group_size, seed=self.step_seed(step), limit=limit
        )

    def start_stream(self) -> None:
        batch = self.cfg.data.batch_size
        self.stream = GroupStream(
            self.sample_group,
            lambda: self.policy.version,
            batch,
            self.cfg.algorithm.max_staleness,
            self.cfg.rollout.concurrency,
            self.cfg.algorithm.group_size,
            first_index=self.start_step * batch,
            end_index=self.cfg.trainer.steps * batch,
        )
        self.stream.start()

    def stop_stream(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None

    def sample_step(self, step: int) -> tuple[list[Trajectory], Taken | None]:
        """The step's trajectories, task by task: sampled now (synchronous), or the groups the
        background stream finished (with those it dropped as stale)."""
        if self.stream is not None:
            taken = self.stream.take()
            return taken.trajectories, taken
        cfg = self.cfg
        tasks = batch_for_step(self.inputs.train_tasks, step, cfg.data.batch_size, cfg.trainer.seed)
        trajs = asyncio.run(
            self.runner.run_batch(
                self.policy, tasks, samples_per_task=cfg.algorithm.group_size, seed=self.step_seed(step)
            )
        )
        return trajs, None

    def train_step(self, step: int) -> dict[str, Any]:
        cfg = self.cfg
        started = time.perf_counter()
        group = cfg.algorithm.group_size
        trajs, taken = self.sample_step(step)
        rollout_s = time.perf_counter() - started  # the learner's wait for the step's episodes
        version = self.policy.version  # the weights this step's update starts from
        groups = [f"{i // group}" for i in range(len(trajs))]
        samples, advantages = build_samples(
            trajs,
            groups,
            cfg.algorithm.norm_adv_by_std,
            cfg.rollout.train_on_malformed,
            cfg.rollout.frozen_agents,
        )
        learn_started = time.perf_counter()
        update = self.learner.step(samples, version)
        if self.stream is not None:
            self.stream.weights_changed()
        metrics = rollout_metrics(trajs, cfg.rollout.train_on_malformed)
        metrics.update(update)
        if taken is not None:
            metrics.update(staleness_metrics(taken, version))
        metrics.update(
            {
                "rollout_s": rollout_s,
                "update_s": time.perf_counter() - learn_started,
                "step_s": time.perf_counter() - started,
                "peak_rss_mb": peak_rss_mb(),
                "advantage_abs_mean": sum(abs(a) for a in advantages) / max(len(advantages), 1),
            }
        )
        if cfg.trainer.log_trajectories:
            self.folder.write_trajectories(
                f"trajectories/step_{step + 1:06d}", trajs[: cfg.trainer.log_trajectories]
            )
        # every trained episode's tokens, each stamped with the weight version that sampled it
        notes = episode_notes(len(trajs), groups, samples, advantages)
        self.folder.write_tokens(step_set(step + 1), trajs, "train", step + 1, notes)
        self.folder.log(step + 1, metrics)
        # after the step is logged: a stopped run keeps it
        if taken is not None and not taken.groups:
            self.failures.record(("stale", stale_example(taken, version)))
        else:
            self.failures.observe(trajs)
        self.trained.observe(trajs, sum(t.trainable(cfg.rollout.train_on_malformed) for t in trajs))
        if self.envs is not None:
            self.envs.check()  # a tool server that died in the step and did not come back stops the run
        return metrics

    # -- the loop -------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        cfg = self.cfg.trainer
        before = after = final = None
        step_times: list[float] = []
        step = self.start_step
        with running_envs(self.cfg.env, self.folder.path) as self.envs:
            try:
                if cfg.eval_before and self.inputs.test_tasks and self.start_step == 0:
                    before = self.evaluate("before", 0)
                # rich draws its bar only on a terminal; into a pipe or a log file (CI, nohup) each
                # step gets a plain line instead, or nothing would show until the run ends
                plain = not console.is_terminal
                with Progress(
                    TextColumn("[bold]GRPO"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TextColumn(
                        "reward {task.fields[reward]:.3f} | success {task.fields[success]:.2f} | tools {task.fields[tools]:.2f} | {task.fields[step_s]:.1f}s/step"
                    ),
                    TimeElapsedColumn(),
                    console=console,
                    disable=plain,
                ) as progress:
                    bar = progress.add_task(
                        "train",
                        total=cfg.steps,
                        completed=self.start_step,
                        reward=0.0,
                        success=0.0,
                        tools=0.0,
                        step_s=0.0,
                    )
                    if self.asynchronous and self.start_step < cfg.steps:
                        self.start_stream()
                    for step in range(self.start_step, cfg.steps):
                        m = self.train_step(step)
                        step_times.append(m["step_s"])
                        progress.update(
                            bar,
                            advance=1,
                            reward=m["reward_mean"],
                            success=m["success_rate"],
                            tools=m["tool_call_rate"],
                            step_s=m["step_s"],
                        )
                        done = step + 1
                        tolerance = self.cfg.algorithm.mismatch_tolerance
                        if plain:
                            console.print(  # one line whatever the width: a log is read with grep
                                step_line(done, cfg.steps, m, tolerance),
                                markup=False,
                                highlight=False,
                                soft_wrap=True,
                            )
                        elif warning := mismatch_warning(m, tolerance):
                            console.print(f"[yellow]step {done}: {escape(warning)}")
                        if done == cfg.steps:
                            self.trained.require_some()  # however short, a run that trained nothing failed
                        if cfg.save_every and done % cfg.save_every == 0 and done < cfg.steps:
                            self.save(done)
                        if (
                            cfg.eval_every
                            and done % cfg.eval_every == 0
                            and done < cfg.steps
                            and self.inputs.test_tasks
                        ):
                            self.evaluate(f"step_{done:06d}", done)
                        step = done
                self.stop_stream()  # groups sampled past the last step are not trained
                final = self.save(cfg.steps, final=True) if cfg.steps > self.start_step else None
                self.learner.drop_optimizer_state()  # saved with the checkpoint; no step follows
                if cfg.eval_after and self.inputs.test_tasks:
                    after = self.evaluate("after", cfg.steps)
            except KeyboardInterrupt:
                if step > self.start_step and final is None:  # the final one has the optimizer state
                    console.print(f"[yellow]interrupted: saved {self.save(step)}")
                raise
            except RunCannotLearn as exc:
                # the failed steps changed nothing; their logs and the weights so far are kept
                console.print(
                    f"[red]stopped after step {step + 1}: {exc}\n[yellow]saved {self.save(step + 1)}"
                )
                raise
            except RunStoppedByDisk:
                raise
            except Exception as exc:
                if disk_full(exc) is None:
                    raise
                raise disk_error(exc, "writing the run folder", self.folder) from exc
            finally:
                self.stop_stream()
                self.runner.close()  # the rollout worker processes, if any
                curve = None
                # a full disk must not hide the error that stopped the run behind these writes
                with contextlib.suppress(OSError):
                    curve = self.folder.plot_reward_curve()
                with contextlib.suppress(OSError):
                    self.folder.close()
                self.envs = None
        summary = {
            "run_dir": str(self.folder.path),
            "steps": cfg.steps,
            "accuracy_before": before.accuracy if before else None,
            "accuracy_after": after.accuracy if after else None,
            "mean_reward_before": before.mean_reward if before else None,
            "mean_reward_after": after.mean_reward if after else None,
            "reward_curve": str(curve) if curve else None,
            "final_checkpoint": str(final) if final else None,
            "step_s_mean": statistics.fmean(step_times) if step_times else None,
            "peak_rss_mb": round(peak_rss_mb(), 1),
        }
        if final is not None and self.cfg.algorithm.lora is not None:
            summary["adapter_mb"] = round(lora.adapter_bytes(final) / 2**20, 2)
        console.print(
            f"[bold green]done[/]: held-out accuracy {_pct(summary['accuracy_before'])} -> {_pct(summary['accuracy_after'])}, "
            f"mean reward {_num(summary['mean_reward_before'])} -> {_num(summary['mean_reward_after'])} after {cfg.steps} steps; reward curve {summary['reward_curve']}"
        )
        view = escape(f"aworld-train view {shlex.quote(str(self.folder.path))}")
        console.print(f"every episode, token by token: [bold]{view}")
        return summary


def rng_state() -> dict[str, Any]:
    """The random generators a step draws from, saved with its checkpoint (sampling itself is
    seeded per step; these cover anything else, such as dropout)."""
    import numpy as np

    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def restore_rng(state: dict[str, Any] | None) -> None:
    if not state:
        return
    import numpy as np

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full(exc: BaseException) -> int | None:
    """ENOSPC or EDQUOT where `exc` (or what caused it) is a write that found no space (or quota)
    left, else None. safetensors' writer keeps the errno in its message only: "(os error 28)"."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _DISK_FULL:
            return seen.errno
        for code in _DISK_FULL:
            if f"(os error {code})" in str(seen):
                return code
        seen = seen.__cause__ or seen.__context__
    return None


def disk_error(exc: BaseException, doing: str, folder: RunFolder) -> RunStoppedByDisk:
    """A full disk (or quota) as the run's one-line failure: the cause, the checkpoint a resume
    continues from, and the fix."""
    latest = folder.latest_checkpoint()
    kept = f"checkpoint {latest[1]} (step {latest[0]}) is intact" if latest else "no checkpoint was saved yet"
    code = disk_full(exc) or errno.ENOSPC
    return RunStoppedByDisk(
        f"{doing} failed: {os.strerror(code).lower()} ({errno.errorcode[code]}) in {folder.path} "
        f"({type(exc).__name__}: {exc}): "
        f"the run stopped; {kept}. Free space on that disk (or set trainer.run_dir to a disk with room), "
        "then continue with `aworld-train run CONFIG --resume`"
    )


def _skipped(folder: RunFolder) -> str:
    """Checkpoints a resume passes over, and why (each was being written when a run stopped)."""
    skipped = [f"{path.name}: {problem}" for _, path, problem in folder.checkpoints() if problem]
    return f"; incomplete checkpoint(s) passed over: {'; '.join(skipped)}" if skipped else ""


def step_line(done: int, steps: int, metrics: dict[str, Any], mismatch_tolerance: float | None = None) -> str:
    """One step's progress as a plain line, with the logprob mismatch where the step measured one
    (and its warning, over `mismatch_tolerance`)."""
    line = (
        f"GRPO step {done}/{steps}: reward {metrics['reward_mean']:.3f} | success "
        f"{metrics['success_rate']:.2f} | tools {metrics['tool_call_rate']:.2f} | {status_mix(metrics)} | "
        f"{metrics['step_s']:.1f}s/step"
    )
    if "dropped_stale" in metrics:
        line += (
            f" | staleness {metrics['staleness_mean']:.2f} (max {metrics['staleness_max']:.0f})"
            f" | dropped stale {metrics['dropped_stale']:.0f}"
        )
    line += mismatch_text(metrics)
    warning = mismatch_warning(metrics, mismatch_tolerance)
    return with_warning(line, warning)


def status_mix(metrics: dict[str, Any]) -> str:
    """How the step's episodes ended, most first: `ok 14, truncated 1, malformed_tool_call 1`."""
    counts = sorted((metrics.get("statuses") or {}).items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{status} {count}" for status, count in counts) or "no episodes"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def train(inputs: RunInputs, resume: bool = False) -> dict[str, Any]:
    return LocalTraining(inputs, resume=resume).run()
