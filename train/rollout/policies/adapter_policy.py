"""One peft adapter of a local policy's model as a policy of its own: a team whose agents each have
a policy (`policies:`) is served by one model in memory, each agent's calls sampled with its
policy's adapter (`PolicyRouter` routes the calls, `LocalPolicy` switches the adapter per batch)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aworld_train.rollout.policies.client import Generation, GrammarKey, SamplingParams
from aworld_train.rollout.policies.router import PolicyRouter

if TYPE_CHECKING:
    from aworld_train.rollout.policies.local import LocalPolicy
    from aworld_train.rollout.policies.vllm_policy import VLLMPolicy


@dataclass(frozen=True)
class AdapterPolicy:
    base: LocalPolicy | VLLMPolicy  # a sampler of a model holding an adapter per policy
    adapter: str  # the peft adapter's name: the policy's

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        return await self.base.generate(prompt_ids, sampling, adapter=self.adapter)

    def check_grammar(self, key: GrammarKey) -> None:
        check = getattr(self.base, "check_grammar", None)  # vLLM's server samples under none yet
        if check is None:
            raise ValueError(
                "this policy's sampler (rollout.engine vllm) samples no grammar (response_format)"
            )
        check(key)

    @property
    def version(self) -> int:
        """The weights' version: one count for the model, whichever adapter a step changed."""
        return self.base.version


# a checkpoint of a run with a policy per agent keeps each policy's peft adapter in policies/<name>/
POLICIES_DIR = "policies"


def saved_policy_adapters(checkpoint: Path) -> dict[str, Path]:
    """A checkpoint's adapter folder per policy (a run with `policies:`); empty for any other."""
    return _saved(checkpoint, "adapter_config.json")


def saved_policy_models(checkpoint: Path) -> dict[str, Path]:
    """A checkpoint's model folder per policy (a run with a full model per policy); empty for any other."""
    return _saved(checkpoint, "config.json")


def _saved(checkpoint: Path, marker: str) -> dict[str, Path]:
    folder = Path(checkpoint) / POLICIES_DIR
    found = sorted(f.parent for f in folder.glob(f"*/{marker}")) if folder.is_dir() else []
    return {f.name: f for f in found}


def load_policy_adapters(model, folders: dict[str, Path], trainable: bool = False):
    """`model` (the base) holding each policy's adapter saved in `folders`, the first one active."""
    from peft import PeftModel

    names = list(folders)
    model = PeftModel.from_pretrained(
        model,
        str(folders[names[0]]),
        adapter_name=names[0],
        is_trainable=trainable,
        autocast_adapter_dtype=False,
    )
    for name in names[1:]:
        model.load_adapter(
            str(folders[name]), adapter_name=name, is_trainable=trainable, autocast_adapter_dtype=False
        )
    model.set_adapter(names[0])
    return model


def adapter_router(policy: LocalPolicy | VLLMPolicy, owner: dict[str, str]) -> PolicyRouter:
    """Each agent's calls (`owner`: agent -> policy name) to its policy's adapter of `policy`'s model."""
    adapters = {name: AdapterPolicy(policy, name) for name in dict.fromkeys(owner.values())}
    return PolicyRouter(
        next(iter(adapters.values())), {agent: adapters[name] for agent, name in owner.items()}
    )
