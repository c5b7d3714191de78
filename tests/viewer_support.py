"""A short local run whose run folder the viewer's tests read (conftest.py: `tiny_local_run`).

The local backend end to end (LocalTraining, its learner, its run folder) on the tiny random model,
with the policy's replies partly scripted so the folder holds what the pages must show, whatever
the random weights do: the first task's samples all call the calculator and answer right (a group
with zero spread); the second task's samples call it in compact JSON and answer right (a chat
template re-renders that call with spaces: drift), answer wrong at once, or are sampled by the
tiny model itself (its tokens' sampled and trainer logprobs then agree).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

from backend_support import calculator_reply

ROWS = [{"prompt": f"What is {i} + 1?", "ground_truth": i + 1} for i in (2, 7)]
OUTCOMES = {0: ("tool",), 1: ("compact", "wrong", "model")}  # by the task's place in ROWS


def config(run_dir: Path, model_dir: Path) -> dict:
    return {
        "model": str(model_dir),
        "agent": "aworld_train.agents.calculator:build_agent",
        "algorithm": {"group_size": 3, "lr": 1e-4},
        "rollout": {
            "max_new_tokens": 48,
            "max_assistant_turns": 3,
            "tool_block": "never",
            "train_on_malformed": True,
        },
        "data": {"batch_size": 2},
        "reward": {"fn": "aworld_train.rewards.calculator:exact_answer"},
        "trainer": {
            "steps": 2,
            "save_every": 0,
            "eval_every": 0,
            "run_dir": str(run_dir),
            "log_trajectories": 2,
        },
        "env": [{"name": "calculator"}],
    }


class PartlyScripted:
    """The local policy, with the replies of most episodes scripted (see the module's docstring)."""

    def __init__(self, policy, tokenizer) -> None:
        self.policy = policy
        self.tokenizer = tokenizer
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.started: Counter[str] = Counter()
        self.model_sampled: set[str] = set()  # the questions whose episode the model answers

    def __getattr__(self, name):  # lock, pad_id, ...: the local policy's
        return getattr(self.policy, name)

    async def generate(self, prompt_ids, sampling):
        from aworld_train.rollout.policies.client import Generation

        text = self.tokenizer.decode(prompt_ids)
        question = text[text.rindex("What is") :].split("?")[0]
        first_call = "<tool_response>" not in text[text.rindex("What is") :]
        if first_call:
            task = next(i for i, row in enumerate(ROWS) if row["prompt"].startswith(question))
            outcomes = OUTCOMES[task]
            outcome = outcomes[self.started[question] % len(outcomes)]
            self.started[question] += 1
            if outcome == "model":
                return await self.policy.generate(prompt_ids, sampling)
            reply = "The answer is 0." if outcome == "wrong" else calculator_reply(text)
            if outcome == "compact":
                reply = reply.replace('", "', '","').replace('": ', '":')
        else:
            reply = calculator_reply(text)
        ids = self.tokenizer.encode(reply, add_special_tokens=False) + [self.end]
        # stamped with the weights' version, as the local policy stamps what it samples
        return Generation(ids, scripted_logprobs(len(ids)), "stop", versions=[self.policy.version] * len(ids))


def scripted_logprobs(n: int) -> list[float]:
    """The logprobs a scripted reply comes with (the tiny model's own are unlike them)."""
    return [-0.05 * (1 + i % 7) for i in range(n)]


def run_tiny(run_dir: Path, model_dir: Path, changes: Callable[[dict], None] | None = None) -> Path:
    """Train 2 steps with an evaluation before and after (or as `changes` edits the config); the
    run folder."""
    import pytest

    from aworld_train import AgentTrainer
    from aworld_train.engines.local import startup

    real = startup.local_runner

    def scripted_runner(*args, **kwargs):
        runner, policy = real(*args, **kwargs)
        return runner, PartlyScripted(policy, kwargs["tokenizer"])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(startup, "local_runner", scripted_runner)
        # float32 whatever the CPU: in bf16 the sampler's cached forward and the learner's whole
        # sequence differ in rounding by up to 0.14 on a token, which the tests would take for a misalignment
        patch.setenv("AWORLD_TRAIN_DTYPE", "float32")
        settings = config(run_dir, model_dir)
        if changes is not None:
            changes(settings)
        AgentTrainer(config=settings, train_dataset=ROWS, test_dataset=ROWS).train()
    return run_dir
