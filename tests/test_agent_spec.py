import pytest
import yaml

from aworld_train.agents.calculator import build_agent as calculator_agent
from aworld_train.aworld.agent_spec import (
    AgentSpec,
    build_agent,
    protect_secrets,
    resolve_env_refs,
    spec_from_agent,
)
from aworld_train.aworld.specs import load_agent_spec
from aworld_train.core.errors import AgentSpecError


def gaia_style_agent(token: str):
    from aworld_train.aworld.framework import Agent, AgentConfig

    mcp = {
        "mcpServers": {
            "gaia": {
                "type": "streamable-http",
                "url": "http://127.0.0.1:9/mcp",
                "headers": {"ENV_CODE": "gaia", "Authorization": f"Bearer {token}"},
                "timeout": 600,
            }
        }
    }
    return Agent(
        name="gaia_agent",
        desc="gaia agent",
        system_prompt="Solve it.",
        mcp_config=mcp,
        mcp_servers=["gaia"],
        tool_names=["t1"],
        conf=AgentConfig(
            llm_provider="verl", top_k=80, llm_api_key="sk-should-not-leak", llm_temperature=0.6
        ),
    )


def test_round_trip_rebuilds_an_equivalent_agent(monkeypatch, tmp_path):
    monkeypatch.setenv("INVITATION_CODE", "secret-invitation-123")
    agent = gaia_style_agent("secret-invitation-123")
    spec = spec_from_agent(agent)
    path = spec.write(tmp_path / "agent.yaml")
    text = path.read_text()
    assert "secret-invitation-123" not in text and "sk-should-not-leak" not in text
    assert spec.mcp_config["mcpServers"]["gaia"]["headers"]["Authorization"] == "Bearer ${INVITATION_CODE}"
    loaded = load_agent_spec(str(path))
    assert loaded == spec
    rebuilt = build_agent(
        loaded, llm={"llm_provider": "aworld_train", "llm_base_url": "aworld-train://x"}, episode_id="ep-1"
    )
    assert rebuilt.name() == "gaia_agent" and rebuilt.desc() == "gaia agent"
    assert (
        rebuilt.system_prompt == "Solve it."
        and rebuilt.mcp_servers == ["gaia"]
        and rebuilt.tool_names == ["t1"]
    )
    headers = rebuilt.mcp_config["mcpServers"]["gaia"]["headers"]
    assert headers["Authorization"] == "Bearer secret-invitation-123"  # resolved in the worker only
    assert headers["X-Episode-Id"] == "ep-1"
    llm = rebuilt.conf.llm_config
    assert llm.llm_provider == "aworld_train" and llm.llm_temperature == 0.6
    assert rebuilt.conf.llm_config.ext_config["top_k"] == 80
    assert spec_from_agent(rebuilt).model_dump(exclude={"mcp_config"}) == spec.model_dump(
        exclude={"mcp_config"}
    )


def test_literal_secret_is_refused():
    with pytest.raises(AgentSpecError, match=r"headers.Authorization holds a literal secret.*\$\{VAR\}"):
        protect_secrets(
            {"mcpServers": {"s": {"headers": {"Authorization": "Bearer literal-token-value"}}}}, env={}
        )


def test_env_references_resolve_at_run_time():
    assert resolve_env_refs({"a": ["${X}", "${Y:-dflt}"]}, env={"X": "1"}) == {"a": ["1", "dflt"]}
    with pytest.raises(AgentSpecError, match="environment variable MISSING_VAR is not set"):
        resolve_env_refs("Bearer ${MISSING_VAR}", env={})


def test_factory_string_and_few_shot():
    spec = load_agent_spec("aworld_train.agents.calculator:build_agent")
    assert spec.factory == "aworld_train.agents.calculator:build_agent"
    assert spec.mcp_servers == ["calculator"] and spec.few_shot[0]["role"] == "user"
    assert spec.mcp_config["mcpServers"]["calculator"]["url"].startswith("${CALCULATOR_MCP_URL")
    assert yaml.safe_load(spec.to_yaml())["name"] == "calculator_agent"
    assert spec_from_agent(calculator_agent()).few_shot == spec.few_shot


def test_bad_agents():
    with pytest.raises(AgentSpecError, match="cannot import"):
        load_agent_spec("no_such_pkg_abc:build")
    with pytest.raises(AgentSpecError, match="does not exist"):
        load_agent_spec("missing-agent.yaml")
    with pytest.raises(AgentSpecError, match="agent is required"):
        load_agent_spec(None)
    with pytest.raises(AgentSpecError, match="cannot be rebuilt"):
        build_agent(AgentSpec(name="x", agent_config={"max_steps": "many"}))
