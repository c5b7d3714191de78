"""`check` and `run`'s checks for AReaL: the render, then AReaL's own config loader on it, in
AReaL's environment (config_check.py), since AReaL cannot share ours."""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aworld_train.inputs.run import RenderedRun, RunInputs
    from aworld_train.prerun.checks import Check

LOADER = "aworld_train.engines.areal.config_check"


def areal_loader(run: RenderedRun, timeout_s: float = 300.0) -> list[Check]:
    from aworld_train.engines.areal.render import AREAL_PYTHON_VARIABLE, areal_python
    from aworld_train.prerun.checks import Check

    python = areal_python()
    gpus = run.final.get("cluster", {}).get("n_gpus_per_node")
    command = [
        python,
        "-m",
        LOADER,
        str(run.config_path),
        *(["--gpus", str(gpus)] if gpus is not None else []),
    ]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [Check("AReaL's config loader", False, f"{python}: {exc}")]
    text = out.stdout + out.stderr
    missing = next((m for m in ("areal", "aworld_train") if f"No module named '{m}'" in text), None)
    if missing:
        return [
            Check(
                "AReaL environment",
                False,
                f"{python} cannot import {missing}: run aworld-train from AReaL's environment "
                f"(bash scripts/areal/install_cpu_env.sh VENV . builds one with aworld-train in it), "
                f"or set {AREAL_PYTHON_VARIABLE} to that environment's python",
            )
        ]
    loaded = next((line for line in text.splitlines() if line.startswith("loaded ")), "")
    checks = [Check("AReaL environment", bool(loaded), python if loaded else text.strip()[-2000:])]
    if not loaded:
        return checks
    failures = [line[len("FAIL: ") :] for line in text.splitlines() if line.startswith("FAIL: ")]
    version = loaded.split("with ", 1)[-1].split("'s", 1)[0]
    checks.append(
        Check("AReaL's config loader", out.returncode == 0 and not failures, "; ".join(failures) or version)
    )
    return checks


def preflight(inputs: RunInputs, run: RenderedRun | None = None) -> list[Check]:
    """The AReaL run's checks; `run` is the render `run` already made, `check` renders here."""
    from aworld_train.core.errors import AworldTrainError
    from aworld_train.engines.areal.render import render
    from aworld_train.prerun.checks import Check

    try:
        run = run or render(inputs)
    except AworldTrainError as exc:
        return [Check("AReaL config renders", False, str(exc))]
    return [Check("AReaL config renders", True, str(run.config_path)), *areal_loader(run)]
