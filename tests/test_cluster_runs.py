"""A verl run that joins a Ray cluster, without one: what the render forwards to every node's
workers and refuses, and the `env:` servers an episode worker resolves on its own node. The
two-node run itself is tests/test_ray_two_nodes.py."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("verl.experimental.agent_loop.agent_loop")

import yaml  # noqa: E402
from backend_support import trainer_for  # noqa: E402

from aworld_train.aworld import install  # noqa: E402
from aworld_train.core.errors import ConfigError  # noqa: E402
from aworld_train.engines import node_servers  # noqa: E402
from aworld_train.inputs.config import load_config  # noqa: E402


def cpu_config(tiny_model_dir, **trainer):
    return {
        "backend": "verl",
        "model": str(tiny_model_dir),
        "algorithm": {"group_size": 2},
        "rollout": {"max_total_tokens": 2048},
        "trainer": trainer,
        "verl": {"trainer": {"device": "cpu"}},
    }


def test_a_run_that_joins_a_cluster_forwards_what_workers_need_and_no_secret(
    tmp_path, tiny_model_dir, monkeypatch
):
    # AWorld's patches are put in place once a session, at the level set then: at the default
    # level, before this test's ERROR, or every later test sees AWorld's warnings dropped
    install()
    monkeypatch.setenv("AWORLD_TRAIN_AWORLD_LOG_LEVEL", "ERROR")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-disk")
    run = trainer_for(tmp_path, cpu_config(tiny_model_dir, ray_address="10.0.0.1:6379")).render()
    ray_init = run.final.ray_kwargs.ray_init
    assert ray_init.address == "10.0.0.1:6379"
    assert "num_cpus" not in ray_init and "num_gpus" not in ray_init  # the nodes declare theirs
    forwarded = dict(ray_init.runtime_env.env_vars)
    assert forwarded["VERL_USE_EXTERNAL_MODULES"] == "aworld_train.engines.verl.cpu"
    assert forwarded["AWORLD_TRAIN_AWORLD_LOG_LEVEL"] == "ERROR"
    assert "sk-not-for-disk" not in run.config_text() and "OPENAI_API_KEY" not in forwarded
    # every worker learns the `env:` servers, to start them on its own node
    loop = yaml.safe_load((run.folder / "agent_loop.yaml").read_text())[0]
    assert loop["env_servers"] == [{"name": "calculator", "env": {}, "per_node": True}]
    # a run on one machine is rendered as before
    alone = trainer_for(tmp_path / "alone", cpu_config(tiny_model_dir)).render()
    assert "address" not in alone.final.ray_kwargs.ray_init and alone.final.ray_kwargs.ray_init.num_gpus == 1


def test_resources_given_for_a_cluster_run_and_an_address_for_another_backend_are_refused(
    tmp_path, tiny_model_dir
):
    config = cpu_config(tiny_model_dir, ray_address="10.0.0.1:6379")
    config["verl"]["ray_kwargs"] = {"ray_init": {"num_cpus": 8}}
    with pytest.raises(ConfigError, match=r"ray_init.num_cpus is set, but the run joins the Ray cluster"):
        trainer_for(tmp_path, config).render()
    with pytest.raises(ConfigError, match="backend 'local' does not join a Ray cluster"):
        load_config({"backend": "local", "trainer": {"ray_address": "10.0.0.1:6379"}})


def test_a_worker_uses_the_launching_nodes_server_where_it_answers_and_starts_its_own_elsewhere(
    calculator_server, tmp_path, monkeypatch
):
    monkeypatch.setattr(node_servers, "_URLS", {})
    monkeypatch.setattr(node_servers, "_STARTED", [])
    servers = [{"name": "calculator", "env": {}, "per_node": True}]
    # on the launching node the exported URL answers: used as it is
    monkeypatch.setenv("CALCULATOR_MCP_URL", calculator_server.url)
    assert node_servers.node_server_urls(servers, tmp_path) == {"calculator": calculator_server.url}
    # on another node it reaches nothing: this node starts its own, and the agent's reference follows
    monkeypatch.setattr(node_servers, "_URLS", {})
    monkeypatch.setenv("CALCULATOR_MCP_URL", "http://127.0.0.1:9/mcp")
    try:
        urls = node_servers.node_server_urls(servers, tmp_path)
        assert urls["calculator"] != "http://127.0.0.1:9/mcp" and node_servers.answers_here(
            urls["calculator"]
        )
        assert os.environ["CALCULATOR_MCP_URL"] == urls["calculator"]
        assert list(tmp_path.glob("env-calculator-node-*.log"))
        assert node_servers.node_server_urls(servers, tmp_path) == urls  # once per process
    finally:
        node_servers._stop_all()
    # per_node: false keeps the launching node's server alone
    monkeypatch.setattr(node_servers, "_URLS", {})
    assert node_servers.node_server_urls([{**servers[0], "per_node": False}], tmp_path) == {}
