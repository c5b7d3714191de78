"""One peft adapter of a local policy's model as a policy of its own: a team whose agents each have
a policy (`policies:`) is served by one model in memory, each agent's calls sampled with its
policy's adapter (`PolicyRouter` routes the calls, `LocalPolicy` switches the adapter per batch).
Where a checkpoint keeps the adapters, and loading them: `checkpoint_layout.py`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from aworld_train.rollout.policies.client import Generation, GrammarKey, SamplingParams

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


def adapter_policies(base: LocalPolicy | VLLMPolicy, names: list[str]) -> dict[str, AdapterPolicy]:
    """Each policy of `names` as its adapter of `base`'s model."""
    return {name: AdapterPolicy(base, name) for name in names}
