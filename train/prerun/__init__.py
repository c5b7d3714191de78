"""What happens before an engine launches: the run's checks (`checks.py`, `aworld-train check`),
the agent's MCP servers answering (`mcp.py`), and the `env:` servers a run starts (`servers.py`)."""
