#!/usr/bin/env bash
# A CPU-only AReaL 1.0.4 environment, apart from the project's own: AReaL's trainer runs there on
# a CPU (examples/calculator/grpo_areal_cpu.yaml), `aworld-train check` loads rendered configs with
# AReaL's loader there, and the AReaL tests run there (`make setup-areal`). AReaL's own pins clash
# with plain pip, so uv installs it with AReaL's override list (from its pyproject, [tool.uv]) plus ours.
#
#   bash scripts/areal/install_cpu_env.sh [VENV=/tmp/areal-venv] [AWORLD_TRAIN_SRC=/path/to/checkout]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VENV=${1:-/tmp/areal-venv}
SRC=${2:-}
PY=${PYTHON:-python3.11}
# The CPU torch wheel: pip's find-links on these machines (PyPI's own torch wheels are CUDA builds).
FIND_LINKS=${PIP_FIND_LINKS:-/opt/wheels}

"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q uv
UV=("$VENV/bin/uv" pip install --python "$VENV/bin/python" --find-links "$FIND_LINKS")
OVERRIDES=(--override "$HERE/areal-overrides.txt" --override "$HERE/cpu-overrides.txt"
           --override "$HERE/aworld-overrides.txt")

"${UV[@]}" "torch==2.13.0"
"${UV[@]}" "${OVERRIDES[@]}" "areal==1.0.4" "mcp[cli]==1.30.0"
if [ -n "$SRC" ]; then
  # aworld's own pins (pillow~=12.0, rich~=14.0, opentelemetry~=1.32) clash with AReaL's:
  # --no-deps, then the few modules the workflow's import path needs (see aworld-runtime.txt).
  "${UV[@]}" --no-deps "aworld==0.3.2"
  "${UV[@]}" --no-deps -e "$SRC"  # editable: a checkout's changes reach AReaL's workers at once
  "${UV[@]}" "${OVERRIDES[@]}" -r "$HERE/aworld-runtime.txt"
fi
"$VENV/bin/python" - <<'PY'
import areal, torch, transformers, omegaconf, hydra
from areal.api.cli_args import GRPOConfig, load_expr_config  # noqa: F401
print(f"areal {areal.__version__}, torch {torch.__version__}, transformers {transformers.__version__}, "
      f"omegaconf {omegaconf.__version__}, hydra-core {hydra.__version__}")
PY
