"""AWorld's rows of the patch table (core/patch_table.py): every change this package makes inside
AWorld, by the module of ours that makes it."""

from __future__ import annotations

from aworld_train.core.upstream import COPIES, RELIES_ON, REPLACES, WRAPS, Patch

AWORLD_VERSION = "0.3.2"  # the release the rows below were read against

_P = "aworld_train.aworld.patches."
_E = "aworld_train.aworld.episode_state."
_T = "aworld_train.aworld.trims."
_LEVELS_DROPPED = tuple(
    f"aworld.logs.util.AWorldLogger.{level}" for level in ("trace", "debug", "info", "success")
)


def _aworld(
    target: str, fingerprint: str, kind: str, sites: tuple[str, ...], why: str, places: tuple[str, ...] = ()
) -> Patch:
    return Patch(target, "aworld", AWORLD_VERSION, fingerprint, kind, sites, why, places)


AWORLD_PATCHES: tuple[Patch, ...] = (
    # -- patches.py: the rollout path -------------------------------------------------------------
    _aworld(
        "aworld.models.utils.num_tokens_from_string",
        "7c5dd9c8307aeb42433dd53f2880b6220b52b943eae630eaa5e06a9379c325ae",
        WRAPS,
        (_P + "_patch_token_counters", _P + "_offline_counter"),
        "a model name other than openai/qwen made tiktoken fetch a vocabulary online; counted offline",
        ("aworld.models.utils.num_tokens_from_string", "aworld.logs.prompt_log.num_tokens_from_string"),
    ),
    _aworld(
        "aworld.models.utils.num_tokens_from_messages",
        "af1bda765a83cf8b20339bb2c0ebafae7460dac88e12805b762e731ffc0eb675",
        WRAPS,
        (_P + "_patch_token_counters", _P + "_offline_counter"),
        "as num_tokens_from_string",
        ("aworld.models.utils.num_tokens_from_messages", "aworld.logs.prompt_log.num_tokens_from_messages"),
    ),
    _aworld(
        "aworld.agents.llm_agent.LLMAgent._save_failed_request_context",
        "1ca51d59405b22c2529f772b64f15d361d4c5d61a5986fc74283320179766e38",
        REPLACES,
        (_P + "_no_failed_request_files",),
        "wrote each failed LLM request to ./failed_requests/; the episode keeps the error instead",
        ("aworld.agents.llm_agent.LLMAgent._save_failed_request_context",),
    ),
    _aworld(
        "aworld.core.event.message_future.MessageFuture._wait_internal",
        "b72cf064b7369d25b150c83f62f1cf3f4774dd1abb08c937d4fd7c4656824823",
        REPLACES,
        (_P + "_patch_message_wait", _P + "_wait_for_node"),
        "polled the state store every 100 ms per awaited message; now woken when the node finishes",
        ("aworld.core.event.message_future.MessageFuture._wait_internal",),
    ),
    _aworld(
        "aworld.runners.state_manager.InMemoryStateStorage.update",
        "cc5c0f2b23c451d6d769c3e07534c7997cd64b70e3a153d64d6121a24c726e81",
        WRAPS,
        (_P + "_patch_message_wait", _P + "_notify_finished"),
        "wakes the MessageFutures waiting on a node once it is recorded finished",
        ("aworld.runners.state_manager.InMemoryStateStorage.update",),
    ),
    _aworld(
        "aworld.memory.main.InMemoryMemoryStore",
        "d45ad43cac2618146cd313af9fb883b0a27affea261c60ef35e95009af8ca49f",
        RELIES_ON,
        (_P + "_use_in_memory_history",),
        "subclassed to index history by session (the default store re-read a JSON folder per lookup)",
    ),
    # -- history.py: an agent's own context settings decide what its calls see ----------------------
    _aworld(
        "aworld.agents.llm_agent.LLMAgent.async_messages_transform",
        "fc16a41bdbeff3ecc6bbbf11f3bb91ab8d7053c164dd47d5666799722be329d4",
        RELIES_ON,
        ("aworld_train.aworld.history.context_config",),
        "in an Amni context a call's history is cut by the context's agent config, not the agent's "
        "memory_config: the context's is made from the agent's",
    ),
    _aworld(
        "aworld.memory.main.AworldMemory._add",
        "3ab167dee5ee031e31b6230e3c206bc089f0995313ee848aaeddd2a9e35e79ae",
        COPIES,
        ("aworld_train.aworld.history.episode_memory",),
        "the short-term summary awaited, not started in a background task: the next call sees it",
    ),
    _aworld(
        "aworld.memory.main.Memory._call_llm_summary",
        "27cca3ddda6b26e57e34915a3cf1f1aabeb8cd85468fbda41b3680b42c00cd83",
        COPIES,
        ("aworld_train.aworld.history.episode_memory",),
        "overridden: the summary is written by the summarised agent's own LLM (the policy), not the "
        "memory's (AWorld 0.3.2 reads no summary_model)",
    ),
    _aworld(
        "aworld.events.util.send_message_with_future",
        "955b42dfecfe9a3a896da893fb3489077cb287139208a8e9ca836f6e51c7d43b",
        RELIES_ON,
        ("aworld_train.aworld.agent_spec.episode_llm",),
        "a DIRECT history write is awaited in the agent's task (an event-driven one for at most 30 s)",
    ),
    _aworld(
        "aworld.sandbox.implementations.sandbox.Sandbox.__del__",
        "effddf11a6533e7fabd5d68d2061029df541072122572660ddedb99f186d53c2",
        WRAPS,
        (_E + "patch_sandbox_del", _E + "_released_sandbox_del"),
        "a released sandbox has nothing to close; AWorld's __del__ warned or opened a loop for each",
        ("aworld.sandbox.implementations.sandbox.Sandbox.__del__",),
    ),
    # -- patches.py: what an episode leaves in AWorld's process-wide registries ---------------------
    _aworld(
        "aworld.core.agent.base.AgentManager",
        "08dc449a91ea74a516260dfa60816c7b3b9ecb241f76a7d284a0206deae00feb",
        RELIES_ON,
        (_E + "_forget_agent", _E + "registry_sizes"),
        "a finished episode's agent leaves AgentFactory's _agent_instance and _agent_conf",
    ),
    _aworld(
        "aworld.core.factory.Factory.__init__",
        "dc02b660a9712a8918ff98b4c06423cd84fb251fbe2c786424ef8f16ec4ea505",
        RELIES_ON,
        (_E + "_forget_agent",),
        "and AgentFactory's _cls, _desc, _ext_info and _prio",
    ),
    _aworld(
        "aworld.sandbox.runtime.manager",
        "d74e9149276a3a38bcff7828d38013aa9aeca173b55f98067967f04166f90037",
        RELIES_ON,
        (_E + "_close_sandbox", _E + "registry_sizes"),
        "a finished episode's sandbox workers get AWorld's stop sentinel and leave _registry",
    ),
    _aworld(
        "aworld.sandbox.run.mcp_servers.McpServers._cleanup_one_server",
        "3899cb3aae5f00611787e45de02ad90da70a8ac46b210615b038c8b7f76635cf",
        RELIES_ON,
        (_E + "_close_sandbox",),
        "queued to the worker that opened the MCP session, which must be the one to close it",
    ),
    _aworld(
        "aworld.runners.state_manager.InMemoryStateStorage",
        "f5406e646c962acacb21380045e81fdd8fc9b891da7ccd5bf0e16c38c0ce8e7f",
        RELIES_ON,
        (_E + "_forget_session_state", _E + "registry_sizes"),
        "a finished episode's state nodes leave _nodes, _session_nodes and _ordered_session_ids",
    ),
    _aworld(
        "aworld.core.tool.base.ToolActionExecutor.register",
        "11e33d1284da015295b9518c0b7592910ca3ec5a386edb863973a2f6cb496060",
        RELIES_ON,
        (_E + "_forget_session_state",),
        "every tool registers by name in one process-wide executor; an episode's own tools leave it",
    ),
    _aworld(
        "aworld.events.inmemory.InMemoryEventbus",
        "b765c9d742aa0e356ee5661998b5aeb80e1dbca6327e0bacbc1f7d2bc81a1fc3",
        RELIES_ON,
        (_E + "_forget_session_state", _E + "registry_sizes"),
        "a finished episode's event queues leave _message_queue",
    ),
    _aworld(
        "aworld.core.event.event_bus.Eventbus.__init__",
        "0e51fe4ff89c0cd0a0d84f1b2d7de42e8008b04793b2b5bff1fdee56a1fca228",
        RELIES_ON,
        (_E + "_forget_session_state",),
        "and its handlers leave _subscribers and _transformer",
    ),
    _aworld(
        "aworld.sandbox.runtime.loop_pool.SandboxLoopPool",
        "14a4104f1ee910ba36f909bc14454e972c49fb84a60fa51ba722b4a8e50a7f10",
        RELIES_ON,
        (_E + "_sandbox_loop_tasks",),
        "counts the tasks alive on the sandbox loops (_instance._loops), for benches and tests",
    ),
    _aworld(
        "aworld.runners.event_runner.TaskEventRunner.do_run",
        "fdb5eeb2b07bd89dc3fd434493fe01082e902ea5d273275528b2dc94a6b94615",
        RELIES_ON,
        (_E + "claim_sandbox",),
        "its end-of-task cleanup reads sandbox.metadata['task_list']; a claim keeps other episodes' open",
    ),
    # -- trims.py: work training never reads ----------------------------------------------------------
    _aworld(
        "aworld.runners.state_manager.RuntimeStateManager.run_succeed",
        "2367bb841001c82419ad8f04d4148db96583d0e0494f5749ed3dbc847d6ee755",
        COPIES,
        (_T + "_patch_run_succeed",),
        "less its DEBUG record, whose f-string rendered the whole node on every message",
        ("aworld.runners.state_manager.RuntimeStateManager.run_succeed",),
    ),
    _aworld(
        "aworld.mcp_client.server.MCPServerStreamableHttp.create_streams",
        "bc1cce2211480203a82a32a17c369827c9f310338af9ed5e5c1418b135674c69",
        COPIES,
        (_T + "apply", _T + "_streams_with_shared_ssl"),
        "plus an httpx client factory that shares one SSL context between MCP sessions",
        ("aworld.mcp_client.server.MCPServerStreamableHttp.create_streams",),
    ),
    _aworld(
        "aworld.mcp_client.server._MCPServerWithClientSession.cleanup",
        "e417843ee993bbe144028b509cff0b977efb8c829bd51ba5a6498632f057ca5c",
        COPIES,
        (_T + "apply", _T + "_cleanup_without_sleep"),
        "less the 100 ms sleep (and INFO record) every episode's end waited for",
        ("aworld.mcp_client.server._MCPServerWithClientSession.cleanup",),
    ),
    _aworld(
        "aworld.models.utils.usage_process",
        "b8cb7802647c33c9649ed6a1f79d6973c2f7b39b102b10a36fff70da61c49c71",
        COPIES,
        (_T + "_patch_usage_process", _T + "_usage_process_without_source"),
        "a frame walk instead of inspect.stack(), which read every frame's source per LLM call",
        ("aworld.models.utils.usage_process", "aworld.agents.llm_agent.usage_process"),
    ),
    _aworld(
        "aworld.logs.util.AWorldLogger",
        "46e034832ce9f58654463b0513cab015822ae44db0a5ff6d0e12ae26705a0f33",
        REPLACES,
        (_T + "quiet_aworld_logs",),
        "a record below the level returns before AWorld inspects its caller's frame and module",
        _LEVELS_DROPPED,
    ),
    _aworld(
        "aworld.logs.prompt_log.PromptLogger",
        "64fee99832033b17345207ef3c82120d33c9c5ea25fbd7d62aed48071ac3283f",
        REPLACES,
        (_T + "quiet_aworld_logs",),
        "three prompt logs that render the context and count its tokens only to log it at INFO",
        tuple(
            f"aworld.logs.prompt_log.PromptLogger.{name}"
            for name in ("log_agent_call_llm_messages", "log_formatted_parameters", "log_summary_memory")
        ),
    ),
    _aworld(
        "aworld.logs.util.log_llm_record",
        "e5e0befdd9eeaaa9da5dae2a61fdf522afcc1807501288e00fc732e082a78fae",
        REPLACES,
        (_T + "quiet_aworld_logs",),
        "every LLM request and response as JSON, at INFO",
        tuple(f"aworld.{m}.log_llm_record" for m in ("logs.util", "models.llm", "models.openai_provider")),
    ),
    # -- console.py: run when aworld_train is imported -------------------------------------------------
    _aworld(
        "aworld.logs.util.AWorldLogger",
        "46e034832ce9f58654463b0513cab015822ae44db0a5ff6d0e12ae26705a0f33",
        RELIES_ON,
        ("aworld_train.aworld.console.quiet_aworld_console",),
        "removes the console sink (log_id) each logger added when AWorld was imported before us",
    ),
)
