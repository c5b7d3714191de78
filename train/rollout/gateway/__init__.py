"""The token-exact OpenAI-compatible gateway: an agent running in any process, container or
language trains when its `base_url` points at its episode's session (`server.py`); the agent
processes a run starts and talks to (`process_agent.py`); the API's request and answer shapes
(`openai_api.py`)."""
