"""The token-exact gateway: an agent running in any process, container or language trains when its
`base_url` points at its episode's session (`server.py`); the agent processes a run starts and
talks to (`process_agent.py`); the APIs' request and answer shapes, each read into the episode's
one chat call: OpenAI's chat and text completions (`openai_api.py`), OpenAI's Responses API
(`responses_api.py`, its stored responses `conversations.py`) and Anthropic's Messages API
(`messages_api.py`)."""
