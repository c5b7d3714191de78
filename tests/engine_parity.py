"""One calculator task's group, scripted, for the three engines (tests/test_engine_parity.py; the
AReaL side runs in AReaL's environment: `python tests/engine_parity.py RUN/areal OUT.json`).

The n-th episode of the group to begin gets OUTCOMES[n]: a tool call then the tool's answer
(reward 1), a wrong answer at once (reward 0), or a policy that is lost (the episode fails and
leaves the group). Later turns follow from the prompt. Every engine yields samples as
{ids, mask, logprobs (of the mask-1 tokens), advantage}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from backend_support import calculator_reply

OUTCOMES = ("tool", "wrong", "tool", "lost")
CONFIG = {
    "backend": "verl",
    "model": "embedded:smollm2-135m",
    "algorithm": {"group_size": len(OUTCOMES)},
    "rollout": {"tool_block": "never", "max_new_tokens": 64, "max_response_tokens": 300},
    "verl": {"data": {"max_prompt_length": 1024}},
}


def verl_grpo_advantages(outputs: list, keys: list[str]):
    """verl's own GRPO over one group's agent-loop outputs (uid `uid0`), as its V1 trainer runs it:
    each output's reward at its last trained token, the outputs keyed (uid, session, output) in
    `keys`; the advantages, [outputs, the longest response]."""
    import numpy as np
    import torch
    from verl import DataProto
    from verl.trainer.ppo.core_algos import AdvantageEstimator
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    width = max(len(o.response_ids) for o in outputs)
    mask, scores = torch.zeros(len(outputs), width), torch.zeros(len(outputs), width)
    for r, out in enumerate(outputs):
        mask[r, : len(out.response_mask)] = torch.tensor(out.response_mask, dtype=torch.float)
        scores[r, max(i for i, m in enumerate(out.response_mask) if m)] = out.reward_score
    data = DataProto.from_dict(
        tensors={"response_mask": mask, "token_level_rewards": scores},
        non_tensors={"uid": np.array(["uid0"] * len(outputs), dtype=object)},
    )
    return compute_advantage_for_multi_trajectories(data, keys, AdvantageEstimator.GRPO).batch["advantages"]


class GroupScript:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.started = 0
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def reply(self, prompt_ids: list[int]) -> tuple[list[int], list[float]]:
        text = self.tokenizer.decode(prompt_ids)
        if "<tool_response>" not in text[text.rindex("What is") :]:  # an episode's first call
            outcome = OUTCOMES[self.started % len(OUTCOMES)]
            self.started += 1
            if outcome == "lost":
                raise RuntimeError("the policy server is gone")
            if outcome == "wrong":
                text = "The answer is 9."
            else:
                text = calculator_reply(text)
        else:
            text = calculator_reply(text)
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.end]
        return ids, [-0.01 * (i + 1) for i in range(len(ids))]


def sample(ids: list[int], mask: list[int], logprobs: list[float], advantage: float) -> dict:
    """The common form: full ids and mask, the logprobs of the mask-1 tokens."""
    assert len(ids) == len(mask) == len(logprobs)
    kept = [round(lp, 6) for lp, m in zip(logprobs, mask, strict=True) if m]
    return {"ids": list(ids), "mask": list(mask), "logprobs": kept, "advantage": round(float(advantage), 5)}


def areal_samples(folder: Path) -> list[dict]:
    """AReaL's side: our workflow, built as AReaL builds it, against a scripted engine; AReaL's own
    PPOActor turns its rows into per-token advantages."""
    import asyncio

    import torch
    import yaml
    from areal.api.cli_args import GenerationHyperparameters
    from areal.api.io_struct import ModelRequest, ModelResponse
    from areal.trainer.ppo.actor import PPOActor

    from aworld_train.engines.areal.config_check import load
    from aworld_train.engines.areal.workflow import AWorldWorkflow
    from aworld_train.rollout.policies.models import load_tokenizer

    workflow_file = yaml.safe_load((folder / "workflow.yaml").read_text())
    config = load(folder / "areal_config.yaml", [])
    kwargs = {**workflow_file["kwargs"], "episodes_file": None}
    workflow = AWorldWorkflow(**kwargs, gconfig=GenerationHyperparameters(**yaml.safe_load(
        (folder / "areal_config.yaml").read_text())["gconfig"]))  # fmt: skip
    script = GroupScript(load_tokenizer(kwargs["tokenizer"]))

    class Engine:
        async def agenerate(self, req: ModelRequest) -> ModelResponse:
            ids, logprobs = script.reply(list(req.input_ids))
            return ModelResponse(
                input_tokens=list(req.input_ids),
                output_tokens=ids,
                output_logprobs=logprobs,
                output_versions=[0] * len(ids),
                stop_reason="stop",
            )

    row = json.loads((folder / "train.jsonl").read_text().splitlines()[0])
    batch = asyncio.run(workflow.arun_episode(Engine(), row))
    batch["prox_logp"] = torch.roll(batch["logprobs"], shifts=-1, dims=-1)
    out = PPOActor(config.actor, engine=None)._compute_advantages(dict(batch))
    samples = []
    for i in range(batch["input_ids"].shape[0]):
        n = int(batch["attention_mask"][i].sum())
        loss = out["loss_mask"][i].bool()  # AReaL's, shifted to the token before each trained one
        advantage = float(out["advantages"][i][loss][0])
        samples.append(
            sample(
                batch["input_ids"][i][:n].tolist(),
                batch["loss_mask"][i][:n].tolist(),
                batch["logprobs"][i][:n].tolist(),
                advantage,
            )
        )
    return samples


if __name__ == "__main__":
    Path(sys.argv[2]).write_text(json.dumps(areal_samples(Path(sys.argv[1]))))
