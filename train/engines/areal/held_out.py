"""AReaL's trainer at a run's two ends, as the local backend's: a held-out evaluation before any
update and one after the last, and a checkpoint of the last step, the weights that evaluation
measured (`aworld-train eval --checkpoints RUN` reproduces its figure).

AReaL 1.0.4 does none of these. Its evaluator is asked only after each step's update
(`PPOTrainer.train`), so `evaluator.eval_before_train` evaluates the weights of version 1, and the
last step is evaluated (and saved) only where `trainer.steps` is a multiple of `eval_every`
(`save_every`). Here `train` evaluates the weights of version 0 first (unless a recovered run goes
on), AReaL's evaluator keeps the steps between (`eval/step_N`: the weights after step N; not the
last, as on the local backend), and the last step is saved and then evaluated. Each evaluation names
its token set in the workflow's kwargs (`eval_set`: `before`, `step_N`, `after`), the sets
`train/evaluation/run_summary.py` reads. `_evaluate` and `_save_hf` are private methods of AReaL
1.0.4's trainer (`require_areal_version` refuses another AReaL, engines/areal/actor.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from areal import PPOTrainer
from areal.api import SaveLoadMeta
from areal.utils.saver import Saver

from aworld_train.rollout.samples.token_log import step_set


class HeldOutPPOTrainer(PPOTrainer):
    """AReaL's PPOTrainer with the local backend's evaluations before and after training."""

    eval_before: bool = True
    eval_after: bool = True

    def train(self, workflow=None, eval_workflow=None, workflow_kwargs=None, eval_workflow_kwargs=None, **kw):
        if self.eval_before and self.recover_info is None:  # a recovered run evaluated before it stopped
            self._held_out(eval_workflow, eval_workflow_kwargs, "before")
        super().train(
            workflow=workflow,
            eval_workflow=eval_workflow,
            workflow_kwargs=workflow_kwargs,
            eval_workflow_kwargs=eval_workflow_kwargs,
            **kw,
        )
        if self.eval_after:
            self.rollout.pause()  # episodes sampled ahead for a next step (off-policy) wait: none follows
            self._held_out(eval_workflow, eval_workflow_kwargs, "after")

    def _held_out(self, eval_workflow, eval_workflow_kwargs: dict[str, Any] | None, name: str) -> None:
        """One evaluation of the test set by the weights the servers hold now, into `eval/<name>`."""
        if self.eval_rollout is None or self.valid_dataloader is None or eval_workflow is None:
            return
        if self._should_offload_rollout:
            self._onload_rollout(is_eval=True)
        self._evaluate_fn(eval_workflow, {**(eval_workflow_kwargs or {}), "eval_set": name})
        if self._should_offload_rollout:
            self._offload_rollout(is_eval=True)

    def _last_step(self) -> int:
        """AReaL's global step (from 0) that ends the run."""
        steps = self.config.total_train_epochs * len(self.train_dataloader)
        if self.config.total_train_steps is not None:
            steps = min(steps, self.config.total_train_steps)
        return steps - 1

    def _evaluate(self, eval_workflow, eval_workflow_kwargs, epoch: int, epoch_step: int, global_step: int):
        if global_step == self._last_step():
            return  # the evaluation after training follows, where eval_after asks (`train`)
        kwargs = {**(eval_workflow_kwargs or {}), "eval_set": step_set(global_step + 1)}
        super()._evaluate(eval_workflow, kwargs, epoch, epoch_step, global_step)

    def _save_hf(self, epoch: int, epoch_step: int, global_step: int):
        super()._save_hf(epoch, epoch_step, global_step)
        if global_step != self._last_step():
            return
        config = self.config.saver
        path = Path(
            Saver.get_model_save_path(
                config.experiment_name, config.trial_name, config.fileroot, epoch, epoch_step, global_step
            )
        )
        if not any(path.iterdir()):  # not AReaL's step to save: the last weights are saved anyway
            meta = SaveLoadMeta(
                path=str(path),
                weight_format="hf",
                with_optim=False,
                tokenizer=self.tokenizer,
                processor=self.processor,
            )
            self.actor.save(meta)
