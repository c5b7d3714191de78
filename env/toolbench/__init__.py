"""ToolBench on StableToolBench: tasks, their APIs as MCP tools, the server client and its cache stand-in."""
