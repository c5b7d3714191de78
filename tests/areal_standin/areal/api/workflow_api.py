from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


class RolloutWorkflow(ABC):
    @abstractmethod
    async def arun_episode(self, engine, data: dict[str, Any]) -> dict[str, Any] | None: ...
