"""An HTTP server that speaks AgentGym's environment protocol for any `World` class.

The shapes are AgentGym's (its agentenv-textcraft and agentenv-babyai servers), so the
bridge and AgentGym's own clients can use these servers and real ones alike:

- `POST /create` -> `{"id": N, ...}` (TextCraft also returns the first observation)
- `POST /reset {"id": N, "data_idx": I}` -> `{"id", "observation", "reward", "done"}`
- `POST /step {"id": N, "action": "..."}` -> `{"observation", "reward", "done"}`
- `GET /observation?id=N` -> the current observation
- `GET /detail?id=N` -> everything known about the environment
- `POST /close {"id": N}` -> `true`, or `false` for an unknown id
- `GET /` -> a one-line greeting

Errors are answered as AgentGym answers them: HTTP 200 with `{"error": "..."}`; the
bridge reads them as such. `GET /health` is ours: how many environments are open.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Protocol

from fastapi import FastAPI
from pydantic import BaseModel


class World(Protocol):
    """One environment instance: `reset` to an item, then `step` until done."""

    def reset(self, data_idx: int) -> str: ...

    def step(self, action: str) -> tuple[str, float, bool]: ...

    def available_actions(self) -> list[str] | None: ...


class StepBody(BaseModel):
    id: int
    action: str


class ResetBody(BaseModel):
    id: int
    data_idx: int = 0


class CloseBody(BaseModel):
    id: int


class Registry:
    """Environment id -> world, with AgentGym's id semantics (ids count up from 0, never reused)."""

    def __init__(self, make_world, capacity: int = 4096) -> None:
        self.make_world = make_world
        self.capacity = capacity
        self.worlds: dict[int, Any] = {}
        self.info: dict[int, dict[str, Any]] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def create(self) -> dict[str, Any]:
        with self._lock:
            if len(self.worlds) >= self.capacity:
                return {"error": f"{self.capacity} environments are open; close some first"}
            env_id = next(self._ids)
            self.worlds[env_id] = None  # reserved; built by reset
            self.info[env_id] = {"observation": "", "reward": 0.0, "done": False}
        return {"id": env_id}

    def _get(self, env_id: int) -> dict[str, Any]:
        if env_id not in self.info:
            raise LookupError(f"The id {env_id} is not valid.")
        return self.info[env_id]

    def reset(self, env_id: int, data_idx: int) -> dict[str, Any]:
        info = self._get(env_id)
        world = self.make_world()
        observation = world.reset(data_idx)
        self.worlds[env_id] = world
        info.update(observation=observation, reward=0.0, done=False, data_idx=data_idx)
        return {"id": env_id, "observation": observation, "reward": 0.0, "done": False}

    def step(self, env_id: int, action: str) -> dict[str, Any]:
        info = self._get(env_id)
        world = self.worlds.get(env_id)
        if world is None:
            raise LookupError(f"The environment {env_id} has not been reset to an item yet.")
        if info["done"]:
            raise ValueError(f"The task of environment {env_id} has finished.")
        observation, reward, done = world.step(action)
        info.update(observation=observation, reward=reward, done=done)
        return {"observation": observation, "reward": reward, "done": done}

    def close(self, env_id: int) -> bool:
        with self._lock:
            if env_id not in self.info:
                return False
            del self.info[env_id]
            self.worlds.pop(env_id, None)
            return True


def _answer(call, *args) -> Any:
    """AgentGym's convention: a failure is HTTP 200 with `{"error": "..."}`."""
    try:
        return call(*args)
    except Exception as exc:  # noqa: BLE001 - every failure goes back to the client as data
        return {"error": str(exc) or type(exc).__name__}


def build_app(name: str, make_world, capacity: int = 4096) -> FastAPI:
    registry = Registry(make_world, capacity)
    app = FastAPI(title=f"AgentGym-protocol {name} server")
    app.state.registry = registry

    @app.get("/")
    def hello() -> str:
        return f"This is environment {name}."

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "env": name, "open": len(registry.info)}

    # Plain `def` routes: FastAPI runs them in its thread pool, so a slow step (BabyAI's path
    # search) does not hold up other environments' requests.
    @app.post("/create")
    def create() -> Any:
        return _answer(registry.create)

    @app.post("/reset")
    def reset(body: ResetBody) -> Any:
        return _answer(registry.reset, body.id, body.data_idx)

    @app.post("/step")
    def step(body: StepBody) -> Any:
        return _answer(registry.step, body.id, body.action)

    @app.get("/observation")
    def observation(id: int) -> Any:  # noqa: A002 - AgentGym's query parameter name
        return _answer(lambda: registry._get(id)["observation"])

    @app.get("/available_actions")
    def available_actions(id: int) -> Any:  # noqa: A002
        def actions() -> Any:
            registry._get(id)
            world = registry.worlds.get(id)
            return {"available_actions": world.available_actions() if world is not None else None}

        return _answer(actions)

    @app.get("/detail")
    def detail(id: int) -> Any:  # noqa: A002
        return _answer(lambda: dict(registry._get(id)))

    @app.post("/close")
    def close(body: CloseBody) -> Any:
        return registry.close(body.id)

    return app


def serve_app(app: FastAPI, host: str, port: int) -> None:
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level="warning", backlog=4096, timeout_keep_alive=30)
