"""The GAIA tool environment: an MCP gateway over document, Python, calculator and search servers."""

from aworld_train.env.gaia.client import get_agent_tool_env_and_servers

__all__ = ["get_agent_tool_env_and_servers"]
