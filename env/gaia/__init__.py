"""The GAIA tool environment: an MCP gateway over document, Python, calculator and search servers.

The agent side (its MCP config) is `aworld_train.agents.gaia_client`.
"""
