#!/usr/bin/env bash
# The AReaL 1.0.4 environment for a GPU machine (scripts/gpu/areal_smoke.sh), apart from the
# project's own. Resolution checked with `uv pip install --dry-run` (346 packages: torch 2.9.1,
# sglang 0.5.10.post1, transformers 5.3.0, mcp 1.30.0); not run on a GPU here.
#
#   bash scripts/areal/install_gpu_env.sh [VENV=.venv-areal] [AWORLD_TRAIN_SRC=.]
#
# Plain `pip install "areal[sglang]==1.0.4"` stops with ResolutionImpossible: the sglang extra pins
# nvidia-cudnn-cu12==9.16.0.29 while torch 2.9.1 (sglang's pin) requires nvidia-cudnn-cu12==9.10.2.21.
# AReaL settles such clashes with uv's override-dependencies (its pyproject, [tool.uv]); pip has no
# overrides, so uv does it here with the same list.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VENV=${1:-.venv-areal}
SRC=${2:-.}
PY=${PYTHON:-python3.11}

"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q uv
UV=("$VENV/bin/uv" pip install --python "$VENV/bin/python")
"${UV[@]}" --override "$HERE/areal-overrides.txt" --override "$HERE/aworld-overrides.txt" \
  "areal[sglang]==1.0.4" "mcp[cli]==1.30.0" -r "$HERE/aworld-runtime.txt"
# aworld 0.3.2's pins (pillow~=12.0, rich~=14.0, opentelemetry~=1.32) clash with AReaL's
"${UV[@]}" --no-deps "aworld==0.3.2" "$SRC"
"$VENV/bin/python" -c "import areal, sglang, torch; from areal.api.cli_args import GRPOConfig; \
print('areal', areal.__version__, 'sglang', sglang.__version__, 'torch', torch.__version__, torch.cuda.is_available())"
