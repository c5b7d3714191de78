"""`python kill_at.py POINT STEP ARGS...`: `aworld-train ARGS...` (the CLI itself), which kills its
own process with SIGKILL, as the machine's OOM killer or a preempted node would, at POINT of step
STEP (the step number the run logs, from 1):

  rollout  when the step's first episode is scored, the others still running
  update   at the step's optimizer step, after its gradients were computed
  save     while the step's checkpoint is written: after the model's weights, before its trainer state
"""

from __future__ import annotations

import os
import signal
import sys


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def arm(point: str, at: int) -> None:
    import torch

    from aworld_train.engines.local import master_weights, training
    from aworld_train.rollout.episodes import episode

    current = {"step": 0}
    train_step = training.LocalTraining.train_step

    def counted(self, step: int):
        current["step"] = step + 1
        return train_step(self, step)

    training.LocalTraining.train_step = counted
    if point == "rollout":
        score = episode.score

        def scored(traj, task, reward):
            if current["step"] == at:
                die()
            return score(traj, task, reward)

        episode.score = scored
    elif point == "update":
        step = master_weights.MasterWeights.step

        def stepped(self, optimizer, max_grad_norm):
            if current["step"] == at:
                die()
            return step(self, optimizer, max_grad_norm)

        master_weights.MasterWeights.step = stepped
    elif point == "save":
        save = torch.save

        def saved(obj, f, *args, **kwargs):
            if current["step"] == at and str(getattr(f, "name", f)).endswith("trainer_state.pt"):
                die()
            return save(obj, f, *args, **kwargs)

        torch.save = saved
    else:
        raise SystemExit(f"unknown kill point {point!r}: rollout, update or save")


if __name__ == "__main__":
    arm(sys.argv[1], int(sys.argv[2]))
    from aworld_train.facade.cli import main

    sys.exit(main(sys.argv[3:]))
