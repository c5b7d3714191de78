"""Shared fixtures. Nothing here reaches the network: models come from the embedded
wheel or are built at random from a config, servers bind 127.0.0.1."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import sys  # noqa: E402

import early_runs  # noqa: E402
import pytest  # noqa: E402

from aworld_train.inputs.config import RolloutSettings  # noqa: E402

EMBEDDED = "embedded:smollm2-135m"


@pytest.fixture(scope="session")
def tokenizer():
    from aworld_train.rollout.policies.models import load_tokenizer

    return load_tokenizer(EMBEDDED)


@pytest.fixture(scope="session")
def stop_ids(tokenizer):
    from aworld_train.rollout.tokens.turns.stops import stop_token_ids

    return stop_token_ids(tokenizer)


@pytest.fixture(scope="session")
def im_end(tokenizer) -> int:
    return tokenizer.convert_tokens_to_ids("<|im_end|>")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer):
    """A random 2-layer Llama with SmolLM2's tokenizer, saved as a model folder.

    A wide initialisation makes its next-token distributions peaked rather than
    uniform over 49k tokens, so a token choice is something GRPO can shift."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        initializer_range=0.5,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    model = LlamaForCausalLM(config)
    path = tmp_path_factory.mktemp("tiny-model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_local_run(tmp_path_factory, tiny_model_dir, calculator_url):
    """A run folder from a short local run (2 steps, evaluations before and after) on the tiny
    model, its replies partly scripted (tests/viewer_support.py); shared, so read it, never write."""
    from viewer_support import run_tiny

    return run_tiny(tmp_path_factory.mktemp("tiny-local-run") / "run", tiny_model_dir)


@pytest.fixture(scope="session")
def calculator_server():
    from aworld_train.env.launcher import start_server

    server = start_server("calculator")
    yield server
    server.stop()


@pytest.fixture(scope="session", autouse=True)
def calculator_url(calculator_server):
    """Agents built with the calculator's default URL reach this session's server: trainers check
    their agent's MCP servers at construction (tests of an unreachable server name their own URL)."""
    os.environ["CALCULATOR_MCP_URL"] = calculator_server.url
    yield calculator_server.url
    os.environ.pop("CALCULATOR_MCP_URL", None)


@pytest.fixture
def calculator_spec(calculator_server):
    from aworld_train.agents.calculator import build_agent
    from aworld_train.aworld.specs import load_agent_spec

    return load_agent_spec(build_agent(url=calculator_server.url))


@pytest.fixture
def make_runtime(tokenizer, stop_ids):
    from aworld_train.rollout.episodes.runtime import RolloutRuntime
    from aworld_train.rollout.policies.router import PolicyRouter
    from aworld_train.rollout.tokens.templates.renderer import renderer_for

    def make(policy, by_agent=None, **rollout):
        """A runtime whose router serves every agent with `policy` (`by_agent`: those served by another)."""
        rollout.setdefault("tool_block", "never")
        cfg = RolloutSettings(**rollout)
        return RolloutRuntime(
            PolicyRouter(policy, by_agent or {}), renderer_for(tokenizer, cfg), stop_ids, cfg
        )

    return make


@pytest.fixture
def make_runner(tokenizer):
    """An EpisodeRunner of `agent` with the test tokenizer; rollout settings as keywords."""
    from aworld_train.rollout.episodes.runner import EpisodeRunner

    def make(agent, reward=None, **rollout):
        rollout.setdefault("tool_block", "never")
        return EpisodeRunner(agent, tokenizer, RolloutSettings(**rollout), reward)

    return make


@pytest.fixture
def no_model_loads(monkeypatch):
    """Any model or tokenizer load is a failure of the test: checks come first."""
    from aworld_train.rollout.policies import models

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the input was checked")

    for name in ("load_model", "load_tokenizer", "resolve_model_path"):
        monkeypatch.setattr(models, name, refuse)


@pytest.fixture
async def recorded_session():
    """A gateway session on an episode that records each call (tests/gateway_api_support.py), and an
    httpx client that carries its token: (the session, the recording, the client)."""
    import httpx
    from gateway_api_support import Recording

    from aworld_train.rollout.gateway.server import gateway

    recording = Recording()
    opened = gateway().open(recording)
    headers = {"Authorization": f"Bearer {opened.token}"}
    async with httpx.AsyncClient(base_url=opened.base_url, headers=headers, timeout=30) as http:
        yield opened, recording, http
    gateway().close(opened)


def pytest_collection_modifyitems(session, config, items):
    """The long end-to-end runs' tests go last: their runs start with the session (below)."""
    items.sort(key=lambda item: item.module.__name__ in early_runs.LAST_MODULES)


@pytest.fixture(scope="session", autouse=True)
def early_end_to_end_runs(request, tmp_path_factory):
    """Start the collected long runs now, to overlap the rest of the suite (tests/early_runs.py)."""
    names = {item.module.__name__ for item in request.session.items} & set(early_runs.EARLY_MODULES)
    for name in sorted(names):
        early_runs.start(name, sys.modules[name].start_run, tmp_path_factory.mktemp(name))
    yield
    early_runs.stop_all()
