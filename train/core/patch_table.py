"""Every change this package makes inside other packages, in one table (AWorld's rows, the most,
in core/aworld_patch_table.py).

Each row names the upstream object (`target`), the release it was read against, the sha256 of
`inspect.getsource(target)` there, what the patch does to it and where our code does it.
tests/test_patches.py fails when an installed source no longer has its fingerprint, and it and
tests/test_patch_sites.py when code patches something no row declares. `patches.apply` refuses an
AWorld other than the one AWorld's rows were read against and, through `upstream.guard`, an mcp or loguru whose patched
sources changed (the tool servers guard theirs in env/mcp_fixes.py).

To change a patch: re-read the upstream source it names, change the patch, then set its
fingerprint to `aworld_train.core.upstream.fingerprint(target)` on the release it now fits.
"""

from __future__ import annotations

from aworld_train.core.aworld_patch_table import AWORLD_PATCHES
from aworld_train.core.upstream import COPIES, RELIES_ON, WRAPS, Patch

# the releases the rows below were read against
MCP_VERSION = "1.30.0"
LOGURU_VERSION = "0.7.3"
VERL_VERSION = "0.9.1"
BFCL_EVAL_VERSION = "2026.3.23"
AREAL_VERSION = "1.0.4"

_P = "aworld_train.aworld.patches."
_T = "aworld_train.aworld.trims."


def _loguru(target: str, fingerprint: str, why: str) -> Patch:
    return Patch(target, "loguru", LOGURU_VERSION, fingerprint, RELIES_ON, (_P + "_route_file_logs",), why)


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
