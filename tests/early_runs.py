"""End-to-end runs of several minutes (an engine's own trainer in a subprocess) start when the
session starts and run beside the rest of the suite; their tests are moved to the session's end
and wait for them (tests/conftest.py). A module run alone starts its run when its fixture asks.

A module takes part by defining `start_run(folder) -> Started | None` (None: the run cannot
happen here, and its tests skip) and a fixture that returns `result(__name__, start_run, folder)`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

# AReaL's run is not among them: beside the suite on 2 cores its local scheduler ran past its
# time to fork a worker ("Failed to fork 1 out of 1 workers"); it runs alone at the end. The
# learning guard's run takes one thread, the core the suite's tests mostly leave idle.
EARLY_MODULES = ("test_verl_cpu_e2e", "test_learning_guard")
# modules whose tests run last: the early runs', then verl's runs of its asynchronous trainers,
# verl's run resumed with a tool server killed (tests/faults), of a swarm, of an agent in its own
# process, sampled by vLLM and on two Ray nodes, and AReaL's (also sampled by vLLM), each with the
# machine to itself
LAST_MODULES = (
    *EARLY_MODULES,
    "test_verl_cpu_async_e2e",
    "test_verl_cpu_vllm_e2e",
    "test_verl_faults",
    "test_verl_cpu_team_e2e",
    "test_verl_cpu_gateway_e2e",
    "test_ray_two_nodes",
    "test_areal_cpu_e2e",
    "test_areal_cpu_vllm_e2e",
)


@dataclass
class Started:
    process: subprocess.Popen
    log: Path  # the subprocess's stdout and stderr
    timeout_s: float
    collect: Callable[[int, str], dict[str, Any]]  # (returncode, log text) -> the module's result
    output: IO[str]


def launch(
    command: list[str], folder: Path, timeout_s: float, collect: Callable[[int, str], dict], **popen: Any
) -> Started:
    log = folder / "run.log"
    output = log.open("w")
    process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, text=True, **popen)
    return Started(process, log, timeout_s, collect, output)


_runs: dict[str, Started | None] = {}


def start(name: str, start_run: Callable[[Path], Started | None], folder: Path) -> None:
    if name not in _runs:
        _runs[name] = start_run(folder)


def result(name: str, start_run: Callable[[Path], Started | None], folder: Path) -> dict[str, Any]:
    """The run's result, starting it now if the session did not start it already."""
    start(name, start_run, folder)
    run = _runs[name]
    if run is None:
        raise RuntimeError(f"{name}: its run cannot start here (its tests should have been skipped)")
    try:
        run.process.wait(timeout=run.timeout_s)
    except subprocess.TimeoutExpired:
        run.process.kill()
        run.process.wait()
    run.output.close()
    return run.collect(run.process.returncode, run.log.read_text(errors="replace"))


def variant(
    module: str, name: str, start_run: Callable[..., Started | None], folder: Path, *overrides: str
) -> dict:
    """The result of the `name` variant of a module's run, `start_run(folder, *overrides)`, kept apart
    from the module's other variants."""
    return result(f"{module}[{name}]", lambda tmp: start_run(tmp, *overrides), folder)


def stop_all() -> None:
    """End runs whose tests never asked for them (a session stopped early)."""
    for run in _runs.values():
        if run is not None and run.process.poll() is None:
            run.process.kill()
            run.process.wait()
            run.output.close()
