"""backend: local: one process, a transformers model on CPU or one GPU, GRPO over real AWorld episodes.

`LocalTraining.run` is the run loop: evaluate before, then per step sample, score, learn and record
(`train_step`), show it, save and evaluate at their cadence; at the end save, evaluate after and sum
up. Its parts: what it trains with (`startup.py`), where each step's episodes come from
(`sampling.py`), the step's figures (`step_metrics.py`), checkpoints written and resumed from
(`checkpoints.py`), what it shows (`display.py`), a full disk (`disk.py`).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aworld_train.core.atomic_files import write_text
from aworld_train.core.errors import RunCannotLearn, RunStoppedByDisk
from aworld_train.engines.local.checkpoints import (
    checkpoint_to_resume,
    prune_checkpoints,
    restore,
    save_checkpoint,
)
from aworld_train.engines.local.disk import disk_error, disk_full
from aworld_train.engines.local.display import StepDisplay, console, show_done
from aworld_train.engines.local.run_folder import RunFolder
from aworld_train.engines.local.samples import build_samples
from aworld_train.engines.local.sampling import StepSampler
from aworld_train.engines.local.startup import build_parts
from aworld_train.engines.local.step_metrics import (
    episode_notes,
    peak_rss_mb,
    rollout_metrics,
    stale_example,
    staleness_metrics,
)
from aworld_train.evaluation.held_out import held_out
from aworld_train.evaluation.report import EvalReport, evaluate_held_out
from aworld_train.prerun.servers import running_envs
from aworld_train.rollout.policies.checkpoint_layout import adapter_bytes, has_adapter
from aworld_train.rollout.policies.router import PolicyRouter
from aworld_train.rollout.samples.credit import credit_of
from aworld_train.rollout.samples.token_log import EpisodeNotes, step_set

if TYPE_CHECKING:
    from aworld_train.inputs.run import RunInputs


@dataclass
class RunRecord:
    """What the run's summary reads: the evaluations, the final checkpoint, each step's time."""

    before: EvalReport | None = None
    after: EvalReport | None = None
    final: Path | None = None
    curve: Path | None = None
    step_times: list[float] = field(default_factory=list)


class LocalTraining:
    def __init__(self, inputs: RunInputs, resume: bool = False) -> None:
        self.inputs = inputs
        self.cfg = inputs.config
        self.folder = RunFolder(inputs.run_dir)
        self.envs = None  # the env: servers' supervisor while the run runs
        # refused before any model loads where there is nothing to resume
        checkpoint = checkpoint_to_resume(self.folder, inputs.plan) if resume else None
        self.parts = build_parts(inputs, checkpoint)
        self.start_step = restore(checkpoint, self.folder, self.parts) if checkpoint else 0
        self.done = self.start_step  # the steps trained so far
        self.sampler = StepSampler(self.cfg, inputs.train_tasks, self.parts)
        write_text(self.folder.path / "config.yaml", self.cfg.render())
        inputs.spec.write(self.folder.path / "agent_spec.yaml")

    # the parts a step works with
    tokenizer = property(lambda self: self.parts.tokenizer)
    model = property(lambda self: self.parts.model)
    runner = property(lambda self: self.parts.runner)
    learner = property(lambda self: self.parts.learner)

    @property
    def policy(self):
        return self.parts.policy

    @policy.setter
    def policy(self, value) -> None:
        """A run of one policy sampled by `value` instead (benches script it): its router, of one."""
        self.parts.policy, self.parts.router = value, PolicyRouter(value)

    @property
    def asynchronous(self) -> bool:
        """max_staleness > 0: groups are sampled in a thread of their own while the learner trains."""
        return self.cfg.algorithm.max_staleness > 0

    # -- a step and what happens around it ---------------------------------------------------
    def evaluate(self, name: str, step: int) -> EvalReport:
        episodes = evaluate_held_out(
            self.runner,
            self.parts.router,
            self.inputs.test_tasks,
            held_out(self.cfg),
            description=f"eval ({name})",
        )
        report = self.sampler.run(episodes)
        self.folder.write_trajectories(f"eval/{name}", report.trajectories)
        notes = [EpisodeNotes(group=group) for group in report.groups()]
        self.folder.write_tokens(f"eval/{name}", report.trajectories, "eval", step, notes)
        self.folder.log(step, report.summary(), prefix="eval")
        console.print(f"[bold]held-out ({name}, step {step}):[/bold] {report.text()}")
        return report

    def save(self, step: int, final: bool = False) -> Path:
        """The checkpoint of `step`; then only the last `trainer.save_total_limit` and the best stay."""
        path = save_checkpoint(self.inputs.plan, self.cfg.model, self.folder, self.parts, step, final)
        prune_checkpoints(self.folder, self.cfg.trainer.save_total_limit)
        return path

    def train_step(self, step: int) -> dict[str, Any]:
        """Step `step`: sample its episodes, score them into GRPO samples, learn, record."""
        cfg, started = self.cfg, time.perf_counter()
        trajs, taken = self.sampler.sample(step)
        rollout_s = time.perf_counter() - started  # the learner's wait for the step's episodes
        version = self.policy.version  # the weights this step's update starts from
        groups = [f"{i // cfg.algorithm.group_size}" for i in range(len(trajs))]
        samples, advantages = build_samples(
            trajs,
            groups,
            credit_of(cfg.algorithm),
            cfg.rollout.train_on_malformed,
            self.parts.frozen_agents,
        )
        learn_started = time.perf_counter()
        metrics = {
            **rollout_metrics(trajs, cfg.rollout.train_on_malformed),
            **self.learner.step(samples, version),
        }
        self.sampler.weights_changed()
        if taken is not None:
            metrics.update(staleness_metrics(taken, version))
        metrics.update(
            rollout_s=rollout_s,
            update_s=time.perf_counter() - learn_started,
            step_s=time.perf_counter() - started,
            peak_rss_mb=peak_rss_mb(),
            advantage_abs_mean=sum(abs(a) for a in advantages) / max(len(advantages), 1),
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
            self.parts.failures.record(("stale", stale_example(taken, version)))
        else:
            self.parts.failures.observe(trajs)
        self.parts.trained.observe(trajs, sum(t.trainable(cfg.rollout.train_on_malformed) for t in trajs))
        if self.envs is not None:
            self.envs.check()  # a tool server that died in the step and did not come back stops the run
        return metrics

    def after_step(self, done: int) -> None:
        """Step `done` is over: the run's end, or a checkpoint and an evaluation at their cadence."""
        trainer = self.cfg.trainer
        if done == trainer.steps:
            self.parts.trained.require_some()  # however short, a run that trained nothing failed
            return
        if trainer.save_every and done % trainer.save_every == 0:
            self.save(done)
        if trainer.eval_every and done % trainer.eval_every == 0 and self.inputs.test_tasks:
            self.evaluate(f"step_{done:06d}", done)

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        trainer, record = self.cfg.trainer, RunRecord()
        tolerance = self.cfg.algorithm.mismatch_tolerance
        with running_envs(self.cfg.env, self.folder.path) as self.envs, self._stopping(record):
            if trainer.eval_before and self.inputs.test_tasks and self.start_step == 0:
                record.before = self.evaluate("before", 0)
            with StepDisplay(trainer.steps, self.start_step, tolerance) as display:
                if self.asynchronous and self.start_step < trainer.steps:
                    self.sampler.start_stream(self.start_step)
                for step in range(self.start_step, trainer.steps):
                    metrics = self.train_step(step)
                    record.step_times.append(metrics["step_s"])
                    display.step(step + 1, metrics)
                    self.after_step(step + 1)
                    self.done = step + 1
            self.sampler.stop_stream()  # groups sampled past the last step are not trained
            if trainer.steps > self.start_step:
                record.final = self.save(trainer.steps, final=True)
            self.learner.drop_optimizer_state()  # saved with the checkpoint; no step follows
            if trainer.eval_after and self.inputs.test_tasks:
                record.after = self.evaluate("after", trainer.steps)
        return self._summary(record)

    @contextlib.contextmanager
    def _stopping(self, record: RunRecord) -> Iterator[None]:
        """How a run that stops early ends: the weights so far saved (interrupted, or a run that
        cannot learn), a full disk reported as such; the run's processes and files closed however
        it ends."""
        try:
            yield
        except KeyboardInterrupt:
            if self.done > self.start_step and record.final is None:  # the final one has the optimizer state
                console.print(f"[yellow]interrupted: saved {self.save(self.done)}")
            raise
        except RunCannotLearn as exc:
            # the failed steps changed nothing; their logs and the weights so far are kept
            console.print(
                f"[red]stopped after step {self.done + 1}: {exc}\n[yellow]saved {self.save(self.done + 1)}"
            )
            raise
        except RunStoppedByDisk:
            raise
        except Exception as exc:
            if disk_full(exc) is None:
                raise
            raise disk_error(exc, "writing the run folder", self.folder) from exc
        finally:
            self.sampler.stop_stream()
            self.runner.close()  # the rollout worker processes, if any
            self.parts.close()  # vLLM's server, if it samples
            # a full disk must not hide the error that stopped the run behind these writes
            with contextlib.suppress(OSError):
                record.curve = self.folder.plot_reward_curve()
            with contextlib.suppress(OSError):
                self.folder.close()
            self.envs = None

    def _summary(self, record: RunRecord) -> dict[str, Any]:
        before, after, final = record.before, record.after, record.final
        summary = {
            "run_dir": str(self.folder.path),
            "steps": self.cfg.trainer.steps,
            "accuracy_before": before.accuracy if before else None,
            "accuracy_after": after.accuracy if after else None,
            "mean_reward_before": before.mean_reward if before else None,
            "mean_reward_after": after.mean_reward if after else None,
            "reward_curve": str(record.curve) if record.curve else None,
            "final_checkpoint": str(final) if final else None,
            "step_s_mean": statistics.fmean(record.step_times) if record.step_times else None,
            "peak_rss_mb": round(peak_rss_mb(), 1),
        }
        if final is not None and has_adapter(final):  # a run of one LoRA policy
            summary["adapter_mb"] = round(adapter_bytes(final) / 2**20, 2)
        show_done(summary, self.folder.path)
        return summary


def train(inputs: RunInputs, resume: bool = False) -> dict[str, Any]:
    return LocalTraining(inputs, resume=resume).run()
