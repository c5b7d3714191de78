"""One peft adapter of a local policy's model as a policy of its own: a team whose agents each have
a policy (`policies:`) is served by one model in memory, each agent's calls sampled with its
policy's adapter (`PolicyRouter` routes the calls, `LocalPolicy` switches the adapter per batch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from aworld_train.rollout.policies.client import Generation, GrammarKey, SamplingParams

if TYPE_CHECKING:
    from aworld_train.rollout.policies.local import LocalPolicy


@dataclass(frozen=True)
class AdapterPolicy:
    base: LocalPolicy
    adapter: str  # the peft adapter's name: the policy's

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        return await self.base.generate(prompt_ids, sampling, adapter=self.adapter)

    def check_grammar(self, key: GrammarKey) -> None:
        self.base.check_grammar(key)

    @property
    def version(self) -> int:
        """The weights' version: one count for the model, whichever adapter a step changed."""
        return self.base.version
