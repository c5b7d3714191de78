"""Every change this package makes inside other packages, in one table.

Each row names the upstream object (`target`), the release it was read against, the sha256 of
`inspect.getsource(target)` there, what the patch does to it and where our code does it.
tests/test_patches.py fails when an installed source no longer has its fingerprint, and it and
tests/test_patch_sites.py when code patches something no row declares. `patches.apply` refuses an
AWorld other than AWORLD_VERSION and, through `upstream.guard`, an mcp or loguru whose patched
sources changed (the tool servers guard theirs in env/mcp_fixes.py).

To change a patch: re-read the upstream source it names, change the patch, then set its
fingerprint to `aworld_train.core.upstream.fingerprint(target)` on the release it now fits.
"""

from __future__ import annotations

from aworld_train.core.upstream import COPIES, RELIES_ON, REPLACES, WRAPS, Patch

# the releases the rows below were read against
AWORLD_VERSION = "0.3.2"
MCP_VERSION = "1.30.0"
LOGURU_VERSION = "0.7.3"
VERL_VERSION = "0.9.1"
BFCL_EVAL_VERSION = "2026.3.23"
AREAL_VERSION = "1.0.4"

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


def _loguru(target: str, fingerprint: str, why: str) -> Patch:
    return Patch(target, "loguru", LOGURU_VERSION, fingerprint, RELIES_ON, (_P + "_route_file_logs",), why)


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

# mcp and loguru internals that patches.apply and trims.apply use (guarded in patches.apply)
LIBRARY_PATCHES: tuple[Patch, ...] = (
    Patch(
        "mcp.shared._httpx_utils.create_mcp_http_client",
        "mcp",
        MCP_VERSION,
        "465f081b88aebfcbcf0d7962a96211608882dc8f3388513e7685b0710a9f6a26",
        COPIES,
        (_T + "mcp_http_client",),
        "less the SSL context (a CA bundle load) it built for every MCP session's client",
    ),
    _loguru(
        "loguru._logger.Core.__init__",
        "467533bead3da091c47415af3b1b1341424091ec626b9d95a301f1e52cd53421",
        "reads logger._core.handlers to find AWorld's ./logs file sinks (no public API lists them)",
    ),
    _loguru(
        "loguru._handler.Handler.__init__",
        "5dccde594beb7d7cc187de4c0e01c13b9b1d2a556b852d3a6739231a260ea356",
        "reads a handler's _sink, to tell a file sink",
    ),
    _loguru(
        "loguru._file_sink.FileSink.__init__",
        "85b705122aadb19ff331294bcbbefd3ce5d76fa46e3a84c3f5d7b8b41ca4b87e",
        "reads a file sink's _path, to move what it wrote into our log folder",
    ),
)

# the engines' and rewards': applied where they run (verl's processes, the BFCL checker)
ENGINE_PATCHES: tuple[Patch, ...] = (
    Patch(
        "verl.utils.distributed.initialize_global_process_group_ray",
        "verl",
        VERL_VERSION,
        "761a94d1a2e058d31a0ac231c89a142abf5daf822e333bac75e84cafcf7507ac",
        WRAPS,
        ("aworld_train.engines.verl.cpu.platform._gloo_process_group",),
        'on the CPU platform its default backend named "cpu:gloo" twice; the default becomes "gloo"',
        ("verl.utils.distributed.initialize_global_process_group_ray",),
    ),
    Patch(
        "verl.workers.rollout.base.get_rollout_class",
        "verl",
        VERL_VERSION,
        "d0be5827f1214f04fa25ce71c8df8b6297540e8dd714bec35245ec63f932fb74",
        RELIES_ON,
        ("aworld_train.engines.verl.cpu.rollout",),
        "our CPU adapter is added to the private _ROLLOUT_REGISTRY it reads (verl has no call for it)",
    ),
    Patch(
        "verl.trainer.ppo.v1.trainer_base.PPOTrainer._compute_advantage",
        "verl",
        VERL_VERSION,
        "2a4a2aa4a475b228d401959818e0b9019276ce27961c133961de217baa387da7",
        WRAPS,
        (
            "aworld_train.engines.verl.advantages.patch_trainer",
            "aworld_train.engines.verl.advantages._with_turns",
        ),
        "it reads only verl's own estimators' fields from TransferQueue and a registered estimator gets "
        "no batch: the wrapper reads the rows' extra_fields (each turn's reward and state) for gigpo "
        "and discounted; other estimators pass straight through",
        ("verl.trainer.ppo.v1.trainer_base.PPOTrainer._compute_advantage",),
    ),
    Patch(
        "verl.trainer.ppo.v1.utils.compute_advantage_for_multi_trajectories",
        "verl",
        VERL_VERSION,
        "d973cc8aec79bc3d6c5482e3946d158639c27c209fb12b049b71c502d95b0a03",
        RELIES_ON,
        ("aworld_train.engines.verl.advantages._estimate",),
        "it hands an estimator other than grpo the whole batch in the trainer's row order, which the "
        "estimator's turn rows follow",
    ),
    Patch(
        "bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils.execute_multi_turn_func_call",
        "bfcl-eval",
        BFCL_EVAL_VERSION,
        "b113933588954c2afd0f9d21f8d286af006221109789b1743eb2b19e23ecf4c9",
        RELIES_ON,
        ("aworld_train.rewards.bfcl.official_check", "aworld_train.rewards.bfcl_replay.bfcl_results"),
        "it caches instances in its module globals by model name; a check deletes its own after it",
    ),
)

# AReaL's, applied in its rollout workers (engines/areal/seeds.py): checked by tests/areal_env/
_SEEDS = "aworld_train.engines.areal.seeds."
AREAL_PATCHES: tuple[Patch, ...] = (
    Patch(
        "areal.engine.sglang_remote.SGLangBackend.build_generation_request",
        "areal",
        AREAL_VERSION,
        "70eb59bca4bcbb2fa2bad4a893cec3fa0f53ddf2eede5e9973cc87d1da0706d8",
        WRAPS,
        (_SEEDS + "carry_sampling_seeds", _SEEDS + "_seeded"),
        "it sends no seed (AReaL's generation settings have none); the held-out evaluation's seed per "
        "call, from the request's metadata, goes as sampling_params.sampling_seed",
        ("areal.engine.sglang_remote.SGLangBackend.build_generation_request",),
    ),
    Patch(
        "areal.engine.vllm_remote.VLLMBackend.build_generation_request",
        "areal",
        AREAL_VERSION,
        "e78320525a6034a30a2ef65d4add9e0914fc27bf60f48b2a3819b710d9317543",
        WRAPS,
        (_SEEDS + "carry_sampling_seeds", _SEEDS + "_seeded"),
        "as SGLang's: the seed goes as the completions request's seed",
        ("areal.engine.vllm_remote.VLLMBackend.build_generation_request",),
    ),
    Patch(
        "areal.api.io_struct.ModelRequest.copy",
        "areal",
        AREAL_VERSION,
        "eaaf7e3e0a8ccec80e33570ec33725942e7dfc36d13e3d56c20fe4364e82c6c7",
        RELIES_ON,
        (_SEEDS + "_seeded",),
        "agenerate copies the request before building it (and resends that copy after an abort): "
        "the seed rides in its metadata, which the copy keeps",
    ),
)

# the one table: this layer's patches, and those the tool servers declare in env/
# the tool servers' own (env/mcp_fixes.py guards them where the servers run)
SERVER_PATCHES: tuple[Patch, ...] = (
    Patch(
        "mcp.server.streamable_http.StreamableHTTPServerTransport._handle_get_request",
        "mcp",
        "1.30.0",
        "8f6eb97823f9eb435e17bf1be6755ae5ff50bc7ac98800bc668aa0f0043e2f87",
        RELIES_ON,
        (
            "aworld_train.env.mcp_fixes.quiet_closed_streams",
            "aworld_train.env.mcp_fixes._ClosedStandaloneStream.filter",
        ),
        'its "Error in standalone SSE writer" record for a closed GET stream cost ~80 ms of CPU an episode',
    ),
)


PATCHES: tuple[Patch, ...] = (
    AWORLD_PATCHES + LIBRARY_PATCHES + ENGINE_PATCHES + AREAL_PATCHES + SERVER_PATCHES
)
