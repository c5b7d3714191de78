"""What AReaL's trainer needs on a CPU beyond a GPU run, inside AReaL's entry process.

- Our policy server (`cpu/server.py`) replaces SGLang: it is started here, and `ServedPPOTrainer`
  hands its address to AReaL's rollout controller. With `rollout.engine: vllm` vLLM's own server
  samples instead, behind AReaL's vLLM routes (`cpu/vllm_front.py`), and the controller is AReaL's
  `RemotevLLMEngine`. AReaL 1.0.4's `PPOTrainer._init_rollout`
  always builds SGLang's launch arguments (which require the sglang package) and launches a
  server; given `server_infos`, its controller uses running servers instead, which is the one
  method overridden here. With `actor.use_lora`, AReaL passes it the initial adapter its actor
  saved (`lora_path`), which SGLang would get as `--lora-paths <gconfig.lora_name>-v0=PATH` at
  launch: the running server loads it instead (`/load_lora_adapter`), before any request.
- AReaL's `Saver` asks whether the engine is an `ArchonEngine` by importing that module, whose
  MoE kernels import triton (a GPU compiler a CPU environment lacks); on a CPU no engine is one.

Both rely on AReaL's internals, so `require_areal_version` refuses any AReaL but the one they
were written against. The trainer is otherwise that of every AReaL run (`engines/areal/actor.py`).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from copy import deepcopy
from pathlib import Path
from typing import Any

import httpx
from areal.api import LocalInfServerInfo
from areal.api.cli_args import SchedulingStrategy, SchedulingStrategyType
from areal.api.io_struct import get_versioned_lora_name
from areal.engine import RemoteSGLangEngine, RemotevLLMEngine

from aworld_train.engines.areal.actor import MeasuredPPOTrainer, require_areal_version
from aworld_train.env.launcher import _die_with_parent, free_port

ARCHON_MODULE = "areal.experimental.engine.archon_engine"
SERVER_MODULE = "aworld_train.engines.areal.cpu.app"
VLLM_FRONT_MODULE = "aworld_train.engines.areal.cpu.vllm_front"


def without_archon_engine() -> None:
    """Give `Saver` an archon module whose engine class nothing is an instance of, where triton is
    missing (the real module cannot import there)."""
    if importlib.util.find_spec("triton") is not None or ARCHON_MODULE in sys.modules:
        return
    module = types.ModuleType(ARCHON_MODULE)
    module.__doc__ = "aworld-train: no ArchonEngine on a CPU (its kernels need triton)"
    module.ArchonEngine = type("ArchonEngine", (), {})
    sys.modules[ARCHON_MODULE] = module


class ServedPPOTrainer(MeasuredPPOTrainer):
    """AReaL's PPOTrainer whose rollout workers use inference servers that already run."""

    servers: tuple[tuple[str, int], ...] = ()

    def _init_rollout(self, rollout_config, is_eval: bool = False, lora_path: str | None = None):
        if lora_path is not None and not is_eval:  # evaluation shares the rollout's servers
            self.serve_initial_adapter(lora_path)
        config = deepcopy(rollout_config)
        if is_eval:  # as AReaL's own: no off-policyness bound, colocated with the rollout workers
            config.max_head_offpolicyness = int(1e12)
            config.scheduling_strategy = SchedulingStrategy(
                type=SchedulingStrategyType.colocation, target="rollout"
            )
            for spec in config.scheduling_spec:
                spec.gpu = 0
        ranks = self.rollout_alloc.parallel.dp_size
        infos = [
            LocalInfServerInfo(host=host, port=port, process=None)
            for host, port in (self.servers[i % len(self.servers)] for i in range(ranks))
        ]
        engine = RemotevLLMEngine if self.rollout_alloc.backend == "vllm" else RemoteSGLangEngine
        controller = engine.as_controller(config, self.scheduler)
        controller.initialize(
            role="eval-rollout" if is_eval else "rollout", server_args=None, server_infos=infos
        )
        return controller

    def serve_initial_adapter(self, lora_path: str) -> None:
        """Every server loads the adapter AReaL's actor saved at start, as version 0."""
        name = get_versioned_lora_name(self.config.gconfig.lora_name, 0)
        # SGLang's route, or vLLM's (what `--lora-modules` would have loaded at its launch)
        route = "/v1/load_lora_adapter" if self.rollout_alloc.backend == "vllm" else "/load_lora_adapter"
        for host, port in dict.fromkeys(self.servers):
            answer = httpx.post(
                f"http://{host}:{port}{route}",
                json={"lora_name": name, "lora_path": lora_path},
                timeout=600,
            )
            if answer.status_code != 200:
                raise RuntimeError(
                    f"the CPU policy server at {host}:{port} did not load AReaL's initial LoRA adapter "
                    f"{lora_path}: {answer.status_code} {answer.text}"
                )


def wait_healthy(process: subprocess.Popen, url: str, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the CPU policy server exited with status {process.returncode}; see {log}")
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    raise RuntimeError(f"the CPU policy server did not answer {url}/health within {timeout_s:g}s; see {log}")


@contextmanager
def policy_server(
    settings: dict[str, Any], folder: Path, timeout_s: float = 300.0
) -> Iterator[tuple[str, int]]:
    """Our policy server for the run's model, on a free loopback port, until the run ends."""
    port = free_port()
    log = folder / "cpu_server.log"
    command = [sys.executable, "-m", SERVER_MODULE, "--model", str(settings["model"]), "--port", str(port)]
    if settings.get("sampler") == "vllm":
        command = [
            sys.executable,
            "-m",
            VLLM_FRONT_MODULE,
            "--model",
            str(settings["model"]),
            "--port",
            str(port),
        ]
        command += ["--max-len", str(settings["max_len"]), "--seed", str(settings["seed"])]
        command += ["--kv-cache-gib", str(settings["kv_cache_gib"]), "--log", str(folder / "vllm.log")]
        command += ["--weights-parent", str(folder)]
        if settings.get("lora_rank"):
            command += ["--lora-rank", str(settings["lora_rank"])]
    command += ["--events", str(folder / "cpu_server_events.jsonl")]
    print(f"CPU policy server: {' '.join(command)} (log: {log})", flush=True)
    with log.open("ab") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
    try:
        wait_healthy(process, f"http://127.0.0.1:{port}", log, timeout_s)
        yield ("127.0.0.1", port)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def cpu_trainer(
    settings: dict[str, Any], folder: Path, trainer_settings: dict[str, Any] | None = None
) -> Iterator[type[ServedPPOTrainer]]:
    """The trainer class of a CPU run (`trainer_settings` as class attributes, main.py), with our
    policy server running behind it."""
    require_areal_version()
    without_archon_engine()
    with policy_server(settings, folder) as address:
        yield type("CPUPPOTrainer", (ServedPPOTrainer,), {**(trainer_settings or {}), "servers": (address,)})
