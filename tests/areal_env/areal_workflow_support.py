"""Our AReaL workflow the way AReaL runs it, for the tests in AReaL's environment: a scripted
inference engine in place of AReaL's, the workflow built as AReaL builds it from the run folder, the
run's rows, and the padded batch AReaL's executor accepts (tests/areal_env/test_areal_workflow.py,
tests/areal_env/test_areal_rewrites.py)."""

from __future__ import annotations

import importlib

import torch
import yaml
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest, ModelResponse
from areal.api.workflow_api import RolloutWorkflow

BATCH_KEYS = {"input_ids", "attention_mask", "loss_mask", "logprobs", "versions", "rewards"}


class FakeEngine:
    """AReaL's `InferenceEngine.agenerate(req) -> ModelResponse`, replying from a script keyed on the prompt.

    The weight version rises by one per call, as if the trainer updated the weights between turns."""

    def __init__(self, tokenizer, reply):
        self.tokenizer = tokenizer
        self.reply = reply
        self.requests: list[ModelRequest] = []
        self.outputs: list[list[int]] = []
        self.version = 0

    async def agenerate(self, req: ModelRequest) -> ModelResponse:
        self.requests.append(req)
        ids = self.tokenizer.encode(
            self.reply(self.tokenizer.decode(req.input_ids)), add_special_tokens=False
        )
        ids = (ids + [self.tokenizer.convert_tokens_to_ids("<|im_end|>")])[: req.gconfig.max_new_tokens]
        self.outputs.append(ids)
        self.version += 1
        return ModelResponse(
            input_tokens=list(req.input_ids),
            output_tokens=ids,
            output_logprobs=[-0.01 * (i + 1) for i in range(len(ids))],
            output_versions=[self.version] * len(ids),
            stop_reason="stop",
        )


def workflow_like_areal(run, **overrides):
    """What AReaL does with a workflow path: import it, check the base class, build it with the kwargs
    (main.py's: the run's, or with `overrides` as for evaluation)."""
    spec = yaml.safe_load((run.folder / "workflow.yaml").read_text())
    module, _, name = spec["workflow"].rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, RolloutWorkflow)
    gconfig = GenerationHyperparameters(**run.final["gconfig"])
    return cls(**{**spec["kwargs"], **overrides}, gconfig=gconfig)


ONE_RAW = {"group_size": 1, "group_baseline": False}  # evaluation's kwargs: one episode, raw reward


def rows(run):
    return [yaml.safe_load(line) for line in (run.folder / "train.jsonl").read_text().splitlines()]


def check_layout(batch):
    """The tensor-dict format AReaL's executor accepts and its PPO actor reads."""
    assert BATCH_KEYS <= set(batch)
    batch_size, length = batch["input_ids"].shape
    for key in BATCH_KEYS - {"rewards"}:
        assert batch[key].shape == (batch_size, length), key
    assert batch["rewards"].shape == (batch_size,)
    assert batch["input_ids"].dtype == batch["loss_mask"].dtype == batch["versions"].dtype == torch.int32
    assert batch["logprobs"].dtype == batch["rewards"].dtype == torch.float32
    assert batch["attention_mask"].dtype == torch.bool
