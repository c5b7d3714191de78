"""backend: verl on CPU: the rendered config against verl's own Hydra config, auto-fill
rules, and our agent loop run by verl's registry/instantiate path and post-processing."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

pytest.importorskip("verl.experimental.agent_loop.agent_loop")

import yaml  # noqa: E402
from backend_support import ROWS, calculator_reply, trainer_for  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from aworld_train import AgentTrainer  # noqa: E402
from aworld_train.core.errors import ConfigError  # noqa: E402
from aworld_train.engines.verl.render import verl_defaults  # noqa: E402
from aworld_train.rollout.samples.codec import TASK_FIELD, task_from_json  # noqa: E402

GAIA_DIR = Path(__file__).resolve().parents[1] / "examples/train_gaia_with_aworld_verl"
GAIA_EXAMPLE = GAIA_DIR / "grpo_trainer.yaml"

# The shape of AWorld's GAIA grpo_trainer.yaml: verl's own layout, the auto fields left blank.
GAIA_STYLE = """
data: {train_files: "", val_files: null, train_batch_size: 2, max_prompt_length: 1024, max_response_length: 2048}
actor_rollout_ref:
  model: {path: ""}
  rollout: {name: vllm, n: 8, agent: {agent_loop_config_path: "", num_workers: 2}}
  actor: {optim: {lr: 1.0e-6}, ppo_mini_batch_size: 2}
algorithm: {adv_estimator: grpo}
custom_reward_function: {path: "", name: ""}
trainer: {default_local_dir: "", n_gpus_per_node: 8, nnodes: 1, total_training_steps: 3}
"""


def _render(trainer):
    """The engine's run folder, written through the facade as `aworld-train render` does."""
    return trainer.render()


def final_of(run):
    return OmegaConf.to_container(run.final, resolve=False)


def test_native_gaia_yaml_is_accepted_and_its_blanks_are_filled(tmp_path):
    path = tmp_path / "grpo_trainer.yaml"
    path.write_text(GAIA_STYLE)
    trainer = trainer_for(tmp_path, str(path))
    assert trainer.config.backend == "verl"
    run = _render(trainer)
    final = run.final
    folder = run.folder
    assert final.data.train_files == str(folder / "train.parquet") and final.data.val_files == str(
        folder / "val.parquet"
    )
    assert final.actor_rollout_ref.rollout.agent.agent_loop_config_path == str(folder / "agent_loop.yaml")
    assert final.reward.custom_reward_function.name == "exact_answer"
    assert final.reward.custom_reward_function.path.endswith("rewards/calculator.py")
    assert final.trainer.default_local_dir.endswith("run/checkpoints")
    assert final.actor_rollout_ref.model.path.endswith("smollm2-135m")
    # the user's own values are kept as given
    assert final.actor_rollout_ref.rollout.n == 8 and final.actor_rollout_ref.actor.optim.lr == 1e-6
    assert final.data.max_response_length == 2048 and final.trainer.n_gpus_per_node == 8
    # and the parquet carries what our loop needs
    import pyarrow.parquet as pq

    row = pq.read_table(folder / "train.parquet").to_pylist()[0]
    assert row["agent_name"] == "aworld_agent" and row["prompt"] == [
        {"role": "user", "content": "What is 1 * 3?"}
    ]
    assert (
        row["reward_model"]["ground_truth"] == "3"
        and task_from_json(row["extra_info"][TASK_FIELD]).ground_truth == 3
    )
    loop = yaml.safe_load((folder / "agent_loop.yaml").read_text())
    assert loop[0]["_target_"] == "aworld_train.engines.verl.loop.AWorldAgentLoop"


def test_user_set_paths_are_kept(tmp_path):
    import reward_fixtures

    native = yaml.safe_load(GAIA_STYLE)
    native["data"]["train_files"] = "/data/gaia/train.parquet"
    native["data"]["val_files"] = "/data/gaia/val.parquet"
    native["custom_reward_function"] = {"path": reward_fixtures.__file__, "name": "verl_style"}
    native["trainer"]["default_local_dir"] = "/ckpt/gaia"
    # the YAML names the data and the reward itself: no dataset or reward_func is needed
    run = _render(trainer_for(tmp_path, native, reward_func=None, train_dataset=None, test_dataset=None))
    assert run.final.data.train_files == "/data/gaia/train.parquet"
    assert run.final.data.val_files == "/data/gaia/val.parquet"
    assert run.final.reward.custom_reward_function.path == reward_fixtures.__file__
    assert run.final.reward.custom_reward_function.name == "verl_style"
    assert run.final.trainer.default_local_dir == "/ckpt/gaia"
    assert not (run.folder / "train.parquet").exists()
    assert yaml.safe_load((run.folder / "agent_loop.yaml").read_text())[0]["reward"].endswith(
        "reward_fixtures.py:verl_style"
    )


def test_a_dataset_and_native_files_at_once_is_a_contradiction(tmp_path):
    native = yaml.safe_load(GAIA_STYLE)
    native["data"]["train_files"] = "/data/gaia/train.parquet"
    with pytest.raises(
        ConfigError, match="verl.data.train_files='/data/gaia/train.parquet' contradicts data.train"
    ):
        _render(trainer_for(tmp_path, native))
    native = yaml.safe_load(GAIA_STYLE)
    native["custom_reward_function"] = {"path": "/code/other.py", "name": "other"}
    with pytest.raises(ConfigError, match="contradicts reward.fn"):
        _render(trainer_for(tmp_path, native))


def test_no_config_uses_our_dataset_and_reward_never_verls_examples(tmp_path):
    run = _render(trainer_for(tmp_path, {"backend": "verl"}))
    text = run.config_path.read_text()
    assert "gsm8k" not in text
    assert (
        run.final.data.train_files.endswith("train.parquet") and str(tmp_path) in run.final.data.train_files
    )
    assert run.final.reward.custom_reward_function.name == "exact_answer"
    assert run.final.actor_rollout_ref.rollout.n == 4 and run.final.algorithm.adv_estimator == "grpo"


def test_contradiction_between_common_and_native_is_an_error(tmp_path):
    config = {
        "backend": "verl",
        "algorithm": {"group_size": 8},
        "verl": {"actor_rollout_ref": {"rollout": {"n": 4}}},
    }
    with pytest.raises(
        ConfigError, match=r"verl.actor_rollout_ref.rollout.n=4 contradicts algorithm.group_size"
    ):
        _render(trainer_for(tmp_path, config))
    agree = {
        "backend": "verl",
        "algorithm": {"group_size": 4},
        "verl": {"actor_rollout_ref": {"rollout": {"n": 4}}},
    }
    assert _render(trainer_for(tmp_path, agree)).final.actor_rollout_ref.rollout.n == 4


def test_unknown_native_key_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="not a key of verl"):
        _render(trainer_for(tmp_path, {"backend": "verl", "verl": {"trainer": {"totl_steps": 3}}}))


def test_rendered_config_composes_with_verls_hydra_config(tmp_path):
    """The file we launch main_ppo with loads as a Hydra config and passes verl's dataclasses."""
    from hydra import compose, initialize_config_dir
    from verl.utils.config import omega_conf_to_dataclass

    run = _render(trainer_for(tmp_path, {"backend": "verl"}))
    with initialize_config_dir(config_dir=str(run.folder), version_base=None):
        cfg = compose(config_name=run.config_path.stem)
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    assert rollout.n == 4 and rollout.agent.default_agent_loop == "aworld_agent"
    assert omega_conf_to_dataclass(cfg.actor_rollout_ref.actor).clip_ratio_high == 0.28


# -- the loop, the way verl runs it ----------------------------------------------------------


class FakeLLMServerClient:
    """verl's LLMServerClient.generate contract, replying from a script keyed on the prompt."""

    def __init__(self, tokenizer, reply):
        self.tokenizer = tokenizer
        self.reply = reply
        self.calls = []
        self.outputs = []
        self.global_step = 7  # the weight version verl's servers report; moved on by tests

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.calls.append((request_id, list(prompt_ids), dict(sampling_params)))
        text = self.reply(self.tokenizer.decode(prompt_ids))
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [
            self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        ]
        ids = ids[: sampling_params.get("max_tokens", len(ids))]
        self.outputs.append(ids)
        steps = {"min_global_steps": self.global_step, "max_global_steps": self.global_step}
        self.global_step += 1
        return TokenOutput(
            token_ids=ids, log_probs=[-0.25] * len(ids), stop_reason="completed", extra_fields=steps
        )


def instantiate_like_verl(run, tokenizer, server):
    """What AgentLoopWorker does: register from agent_loop.yaml, then hydra-instantiate per sample."""
    import hydra
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
    from verl.utils.dataset.rl_dataset import RLHFDataset

    for entry in OmegaConf.load(run.final.actor_rollout_ref.rollout.agent.agent_loop_config_path):
        _agent_loop_registry[entry.name] = entry
    return hydra.utils.instantiate(
        config=_agent_loop_registry["aworld_agent"],
        trainer_config=DictConfigWrap(config=run.final),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type="llama",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(run.final.data),
        tools=ToolListWrap([]),
    )


def row_kwargs(run, index=0, file="train.parquet"):
    import pyarrow.parquet as pq

    row = pq.read_table(run.folder / file).to_pylist()[index]
    kwargs = {k: v for k, v in row.items() if k not in ("prompt", "agent_name")}
    kwargs["raw_prompt"] = row["prompt"]
    return kwargs


@pytest.fixture
def verl_run(tmp_path, calculator_server, monkeypatch):
    monkeypatch.setenv("CALCULATOR_MCP_URL", calculator_server.url)
    config = {
        "backend": "verl",
        "model": "embedded:smollm2-135m",
        "rollout": {"tool_block": "never", "max_response_tokens": 300},
        "verl": {"data": {"max_prompt_length": 1024}},
    }
    return _render(trainer_for(tmp_path, config))


def test_our_loop_runs_through_verls_instantiate_path(verl_run, tokenizer):
    server = FakeLLMServerClient(tokenizer, calculator_reply)
    loop = instantiate_like_verl(verl_run, tokenizer, server)
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    outs = asyncio.run(loop.run(sampling, **row_kwargs(verl_run)))
    assert len(outs) == 1  # one segment
    out = outs[0]
    assert out.reward_score == 1.0 and out.extra_fields["aworld_status"] == "ok"
    assert len({c[0] for c in server.calls}) == 1  # one sticky request id per episode
    assert all(c[2]["max_tokens"] <= 300 for c in server.calls)
    # exact ids: the first prompt is the prompt; the mask-1 tokens are exactly what the server sampled
    assert out.prompt_ids == server.calls[0][1]
    sampled = [t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m]
    assert sampled == [t for ids in server.outputs for t in ids] and 0 in out.response_mask
    # and every later prompt is a prefix of prompt + response
    for _, prompt, _ in server.calls[1:]:
        assert (out.prompt_ids + out.response_ids)[: len(prompt)] == prompt
    assert out.response_logprobs == [(-0.25 if m else 0.0) for m in out.response_mask]
    assert "<tool_response>\n3\n</tool_response>" in tokenizer.decode(out.response_ids)
    assert set(out.extra_fields["reward_extra_info"]) == {
        "status",
        "num_tool_calls",
        "tool_errors",
        "segments",
        "segments_dropped",
        "agent",
        "truncated",
        "reward_extras",
        "acc",
    }
    assert out.extra_fields["reward_extra_info"]["agent"] == "calculator_agent"


def test_outputs_carry_the_weight_versions_and_stop_tokens_verl_needs(verl_run, tokenizer):
    """verl's V1 trainer reads min/max_global_steps from every output (`int()` of them: a missing
    one crashed it after the first update); vLLM must stop at the end-of-turn token."""
    import numpy as np

    server = FakeLLMServerClient(tokenizer, calculator_reply)
    loop = instantiate_like_verl(verl_run, tokenizer, server)
    [out] = asyncio.run(loop.run({"temperature": 1.0}, **row_kwargs(verl_run)))
    assert len(server.calls) == 2  # the tool call, then the answer
    assert (out.extra_fields["min_global_steps"], out.extra_fields["max_global_steps"]) == (7, 8)
    np.array([out.extra_fields["min_global_steps"], out.extra_fields["max_global_steps"]], dtype=int)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert all(im_end in call[2]["stop_token_ids"] for call in server.calls)


def test_each_call_stamps_its_tokens_with_the_version_verl_reports(tokenizer):
    """verl's server names the weight version of each call (`global_steps`); a call its partial
    rollout resumed on newer weights names only the span, so its tokens' versions are unknown."""
    from aworld_train.engines.verl.loop import VerlServerPolicy
    from aworld_train.rollout.policies.client import SamplingParams
    from aworld_train.rollout.tokens.ledger import NO_VERSION

    server = FakeLLMServerClient(tokenizer, lambda _: "hello")
    policy = VerlServerPolicy(server, {"temperature": 1.0})
    first = asyncio.run(policy.generate([1, 2, 3], SamplingParams(max_new_tokens=8)))
    second = asyncio.run(policy.generate([1, 2, 3], SamplingParams(max_new_tokens=8)))
    assert first.versions == [7] * len(first.token_ids) and second.version == 8
    assert (policy.extra_fields["min_global_steps"], policy.extra_fields["max_global_steps"]) == (7, 8)

    async def resumed(request_id, **kwargs):  # aborted at version 8, finished on version 9
        out = await FakeLLMServerClient.generate(server, request_id, **kwargs)
        out.extra_fields = {"global_steps": 9, "min_global_steps": 8, "max_global_steps": 9}
        return out

    server.generate = resumed
    spanning = asyncio.run(policy.generate([1, 2, 3], SamplingParams(max_new_tokens=8)))
    assert spanning.versions == [NO_VERSION] * len(spanning.token_ids)
    assert policy.extra_fields["max_global_steps"] == 9  # the span still reaches verl


def test_a_failed_episode_gives_verl_no_sample(verl_run, tokenizer):
    """verl's V1 trainer leaves an agent loop that returns no output out of its group: no loss,
    no place in the baseline."""

    def server_lost(_):
        raise RuntimeError("server lost")

    loop = instantiate_like_verl(verl_run, tokenizer, FakeLLMServerClient(tokenizer, server_lost))
    assert asyncio.run(loop.run({"temperature": 1.0}, **row_kwargs(verl_run))) == []


def test_outputs_pass_verls_v0_postprocess_and_v1_as_dict(verl_run, tokenizer):
    import torch
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.utils.config import omega_conf_to_dataclass

    loop = instantiate_like_verl(verl_run, tokenizer, FakeLLMServerClient(tokenizer, calculator_reply))
    outputs = [asyncio.run(loop.run({"temperature": 1.0}, **row_kwargs(verl_run, i)))[0] for i in range(2)]

    as_dict = outputs[0].as_dict()
    assert torch.equal(as_dict["responses"], torch.tensor(outputs[0].response_ids))
    assert torch.equal(as_dict["response_mask"], torch.tensor(outputs[0].response_mask))

    # V0: the worker's own padding/post-processing, on a worker built without Ray
    worker = object.__new__(AgentLoopWorker)
    worker.config = verl_run.final
    worker.rollout_config = omega_conf_to_dataclass(verl_run.final.actor_rollout_ref.rollout)
    worker.tokenizer, worker.processor = tokenizer, None
    worker.mm_processor_kwargs = {}
    worker.reward_loop_worker_handles = None
    worker.distillation_enabled = False
    internal = [
        asyncio.run(worker._agent_loop_postprocess(o, False, **row_kwargs(verl_run, i)))
        for i, o in enumerate(outputs)
    ]
    batch = worker._postprocess(internal)
    response_length = worker.rollout_config.response_length
    assert batch.batch["responses"].shape == (2, response_length)
    for i, out in enumerate(outputs):
        n = len(out.response_ids)
        assert batch.batch["responses"][i, :n].tolist() == out.response_ids
        assert batch.batch["response_mask"][i, :n].tolist() == out.response_mask
        assert batch.batch["rm_scores"][i].sum().item() == out.reward_score == 1.0
    assert list(batch.non_tensor_batch["status"]) == ["ok", "ok"]


# -- parity with verl's ToolAgentLoop ----------------------------------------------------------

# ChatML with tool support that names the tools in the system turn. Names only: the two loops get
# their JSON schemas from different sources (MCP vs verl's tool registry), whose key order differs.
PARITY_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m.role == 'system' %}<|im_start|>system\n{{ m.content }}"
    "{% if tools %}\nTools: {% for t in tools %}{{ t.function.name }} {% endfor %}{% endif %}<|im_end|>\n"
    "{% elif m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant\n{{ m.content }}"
    "{% for c in m.tool_calls %}<tool_call>\n"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n'
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CALC_TOOL = '''
from verl.tools.function_tool import function_tool

from aworld_train.env.calculator import evaluate


@function_tool
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: the expression
    """
    return evaluate(expression)


@function_tool
def last_result() -> str:
    """The result of this conversation's previous calculation."""
    return ""
'''


def test_token_parity_with_verls_tool_agent_loop(tmp_path, tokenizer, calculator_server, monkeypatch):
    import copy

    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
    from verl.tools.tool_registry import load_all_tools
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from aworld_train.agents.calculator import SYSTEM_PROMPT, build_agent
    from aworld_train.aworld.specs import load_agent_spec

    monkeypatch.setenv("CALCULATOR_MCP_URL", calculator_server.url)
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = PARITY_TEMPLATE
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}

    # ours: the calculator agent without few-shot turns, rendered for verl
    spec = load_agent_spec(build_agent()).model_copy(update={"few_shot": []})
    trainer = trainer_for(tmp_path, {"backend": "verl", "rollout": {"tool_block": "never"}}, agent=spec)
    run = _render(trainer)
    ours_server = FakeLLMServerClient(tok, calculator_reply)
    [ours] = asyncio.run(instantiate_like_verl(run, tok, ours_server).run(sampling, **row_kwargs(run)))

    # verl's ToolAgentLoop with an equivalent function tool, the same system prompt and replies
    tool_file = tmp_path / "calc_tool.py"
    tool_file.write_text(CALC_TOOL)
    cfg = verl_defaults(
        [
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.multi_turn.format=hermes",
            f"data.max_response_length={run.final.data.max_response_length}",
        ]
    )
    raw_prompt = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "What is 1 * 3?"}]

    async def run_tool_agent_loop():
        loop = ToolAgentLoop(  # it binds the running event loop at construction
            trainer_config=DictConfigWrap(cfg),
            server_manager=FakeLLMServerClient(tok, calculator_reply),
            tokenizer=tok,
            processor=None,
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(cfg.data),
            hf_model_type="qwen2",
            tools=ToolListWrap(load_all_tools(tool_config_path=None, function_tool_path=str(tool_file))),
        )
        return await loop.run(sampling, raw_prompt=raw_prompt, extra_info={}, tools_kwargs={}, index=0)

    theirs = asyncio.run(run_tool_agent_loop())

    assert ours.reward_score == 1.0
    assert ours.prompt_ids == theirs.prompt_ids
    assert ours.response_ids == theirs.response_ids
    assert ours.response_mask == theirs.response_mask


def test_a_failed_launch_is_an_error_that_names_the_log(tmp_path, monkeypatch, capsys):
    """`run` starts verl's entry point in a subprocess and streams its output into verl.log; an
    engine that exits non-zero makes `train()` raise and `aworld-train run` exit 1, with the log's
    path and last lines in the message. (The command itself is replaced: main_ppo needs GPUs.)"""
    import sys

    from aworld_train.core.errors import EngineFailed
    from aworld_train.engines.verl import render as verl_render
    from aworld_train.facade import cli
    from aworld_train.prerun import checks as preflight

    # the preflight has its own test below; vLLM cannot be installed here
    monkeypatch.setattr(preflight, "require_checks", lambda inputs, engine, run: None)
    monkeypatch.setattr(
        verl_render,
        "command",
        lambda folder, config_path: (
            sys.executable,
            "-c",
            "print('step:1 - reward 0.5'); raise SystemExit(3)",
        ),
    )
    log = tmp_path / "run" / "verl.log"
    with pytest.raises(
        EngineFailed, match=rf"(?s)verl exited with status 3.*{re.escape(str(log))}.*step:1 - reward 0.5"
    ):
        trainer_for(tmp_path, {"backend": "verl"}).train()
    assert "step:1 - reward 0.5" in log.read_text()
    assert "step:1 - reward 0.5" in capsys.readouterr().err

    monkeypatch.setattr(
        "aworld_train.facade.cli._trainer", lambda args: trainer_for(tmp_path / "cli", {"backend": "verl"})
    )
    assert cli.main(["run", "unused.yaml"]) == 1
    err = capsys.readouterr().err
    assert "aworld-train: error: verl exited with status 3" in err
    assert str(tmp_path / "cli" / "run" / "verl.log") in err and "| step:1 - reward 0.5" in err


def test_the_gpu_smoke_models_files_travel_with_the_repo(tmp_path):
    """scripts/gpu/verl_smoke.sh builds its model from files in the repository and renders the example."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, str(root / "scripts/gpu/make_tiny_model.py"), str(tmp_path / "tiny")],
        capture_output=True,
        text=True,
        check=True,
    )
    model = out.stdout.strip().splitlines()[-1]
    trainer = AgentTrainer(
        config=str(root / "examples/calculator/grpo_verl.yaml"),
        overrides=[f"model={model}", f"trainer.run_dir={tmp_path / 'run'}"],
        train_dataset=ROWS,
        test_dataset=ROWS[:2],
    )
    run = _render(trainer)
    assert run.final.actor_rollout_ref.model.path == model
    assert run.final.trainer.n_gpus_per_node == 1


# -- launch defects found against verl 0.9.1's source ----------------------------------------------


def test_token_budgets_fit_the_longest_sequence(tmp_path):
    """verl asserts max_token_len >= the longest sequence when it splits a batch (seqlen_balancing.py):
    the GAIA example allows 4096 + 8192 tokens, more than the 4096 budget derived before."""
    overrides = [f"trainer.run_dir={tmp_path / 'run'}", f"data.train={GAIA_DIR / 'train.jsonl'}"]
    run = _render(
        AgentTrainer(config=str(GAIA_EXAMPLE), overrides=[*overrides, f"data.test={GAIA_DIR / 'test.jsonl'}"])
    )
    longest = run.final.data.max_prompt_length + run.final.data.max_response_length
    assert longest == 4096 + 8192
    assert run.final.actor_rollout_ref.actor.ppo_max_token_len_per_gpu >= longest
    assert run.final.actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu >= longest
    assert run.final.actor_rollout_ref.ref.log_prob_max_token_len_per_gpu >= longest


def test_a_token_budget_the_user_set_too_small_is_refused(tmp_path):
    native = {
        "data": {"max_prompt_length": 1024},
        "actor_rollout_ref": {"actor": {"ppo_max_token_len_per_gpu": 1000}},
    }
    with pytest.raises(
        ConfigError, match=r"verl.actor_rollout_ref.actor.ppo_max_token_len_per_gpu=1000.*at least"
    ):
        _render(trainer_for(tmp_path, {"backend": "verl", "verl": native}))
    small = {
        "backend": "verl",
        "algorithm": {"micro_batch_tokens": 512},
        "verl": {"data": {"max_prompt_length": 1024}},
    }
    with pytest.raises(ConfigError, match=r"algorithm.micro_batch_tokens=512"):
        _render(trainer_for(tmp_path, small))


def test_a_run_resumes_only_when_asked(tmp_path, monkeypatch):
    """verl's resume_mode defaults to auto: a run without --resume would continue from old checkpoints."""
    import sys

    from aworld_train.engines.verl import render as verl_render
    from aworld_train.prerun import checks as preflight

    run = _render(trainer_for(tmp_path, {"backend": "verl"}))
    assert run.final.trainer.resume_mode == "disable"
    monkeypatch.setattr(preflight, "require_checks", lambda inputs, engine, run: None)
    printed = "import sys; print('ARGS', sys.argv[1:])"
    monkeypatch.setattr(verl_render, "command", lambda folder, config_path: (sys.executable, "-c", printed))
    # a checkpoint verl was killed while writing: its tracker file, written last, does not name it
    checkpoints = tmp_path / "run" / "checkpoints"
    (checkpoints / "global_step_2").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"--resume: .*checkpoints holds no checkpoint to continue from"):
        trainer_for(tmp_path, {"backend": "verl"}).train(resume=True)
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("2")
    trainer_for(tmp_path, {"backend": "verl"}).train(resume=True)
    assert "ARGS ['trainer.resume_mode=auto']" in (tmp_path / "run" / "verl.log").read_text()


def test_the_legacy_trainer_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"trainer.use_v1=false.*baseline"):
        _render(trainer_for(tmp_path, {"backend": "verl", "verl": {"trainer": {"use_v1": False}}}))


def test_prompts_that_cannot_fit_are_reported_at_render(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="aworld_train"):
        _render(trainer_for(tmp_path, {"backend": "verl", "rollout": {"max_prompt_tokens": 20}}))
    assert "training prompts are longer than data.max_prompt_length=20" in caplog.text


def test_an_over_long_first_prompt_is_a_failed_episode(verl_run, tokenizer, monkeypatch):
    """Never left-truncated (that breaks the ledger): the episode ends before the policy is called."""
    server = FakeLLMServerClient(tokenizer, calculator_reply)
    loop = instantiate_like_verl(verl_run, tokenizer, server)
    monkeypatch.setattr(loop.settings, "max_prompt_tokens", 16)
    assert asyncio.run(loop.run({"temperature": 1.0}, **row_kwargs(verl_run))) == []
    assert server.calls == []


def test_attention_that_is_installed_and_one_reward_worker(tmp_path):
    """verl's actor asks for flash_attention_2, which verl does not install; its 8 reward workers
    would idle (our loop scores)."""
    import importlib.util

    run = _render(trainer_for(tmp_path, {"backend": "verl"}))
    expected = "flash_attention_2" if importlib.util.find_spec("flash_attn") else "sdpa"
    assert run.final.actor_rollout_ref.model.override_config.attn_implementation == expected
    assert run.final.reward.num_workers == 1
    from verl.utils.config import omega_conf_to_dataclass

    model = omega_conf_to_dataclass(run.final.actor_rollout_ref.model)  # verl's own model config accepts it
    assert model.override_config["attn_implementation"] == expected


def test_run_checks_before_it_launches(tmp_path, monkeypatch, calculator_server):
    """`run` on verl fails on this machine before anything launches, naming what is missing."""
    import sys

    from aworld_train.engines.verl import render as verl_render

    monkeypatch.setenv("CALCULATOR_MCP_URL", calculator_server.url)
    launched = tmp_path / "launched"
    monkeypatch.setattr(
        verl_render,
        "command",
        lambda folder, config_path: (sys.executable, "-c", f"open({str(launched)!r}, 'w')"),
    )
    with pytest.raises(ConfigError, match=r"the run cannot start:\nFAIL module vllm: not installed") as error:
        trainer_for(tmp_path, {"backend": "verl"}).train()
    assert "MCP server" not in str(error.value)  # the server answered
    assert not launched.exists()


def test_run_starts_its_servers_and_renders_once(tmp_path, monkeypatch):
    """The checks and the launch share one render and one start of each env server: the engine
    runs with the servers the checks listed."""
    import sys

    from aworld_train.engines.verl import checks as verl_checks
    from aworld_train.engines.verl import render as verl_render
    from aworld_train.env import launcher

    renders, starts = [], []
    real_render, real_start = verl_render.render, launcher.start_server

    def counted_render(inputs):
        renders.append(inputs.run_dir)
        return real_render(inputs)

    def counted_start(name, **kwargs):
        server = real_start(name, **kwargs)
        starts.append(server.url)
        return server

    monkeypatch.setattr(verl_render, "render", counted_render)
    monkeypatch.setattr(launcher, "start_server", counted_start)
    monkeypatch.setattr(verl_checks, "package_checks", lambda final: [])  # vLLM cannot be installed here
    printed = "import os; print('URL', os.environ['CALCULATOR_MCP_URL'])"
    monkeypatch.setattr(verl_render, "command", lambda folder, config_path: (sys.executable, "-c", printed))
    result = trainer_for(tmp_path, {"backend": "verl"}).train()
    assert result["returncode"] == 0
    assert len(renders) == 1 and len(starts) == 1
    assert f"URL {starts[0]}" in (tmp_path / "run" / "verl.log").read_text()


def test_verls_v1_advantages_leave_a_failed_episode_out_of_its_group(verl_run, tokenizer):
    """Our loop's outputs for one group, one episode failed: verl's own V1 advantage code gives the
    others exactly the advantages of the group without it."""
    import numpy as np
    import torch
    from verl import DataProto
    from verl.trainer.ppo.core_algos import AdvantageEstimator
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    def rewarded(score):
        def reply(prompt_text):
            return f"The answer is {score}."

        return reply

    def server_lost(_):
        raise RuntimeError("server lost")

    sessions = {}
    for session, reply in enumerate([rewarded(3), rewarded(4), server_lost, rewarded(3)]):
        loop = instantiate_like_verl(verl_run, tokenizer, FakeLLMServerClient(tokenizer, reply))
        sessions[session] = asyncio.run(loop.run({"temperature": 1.0}, **row_kwargs(verl_run)))
    assert sessions[2] == []  # the failed one: no output at all

    def advantages(outputs: dict[int, list]) -> list[float]:
        keys = [f"uid0_{s}_{i}" for s, outs in outputs.items() for i in range(len(outs))]
        rows = [o for outs in outputs.values() for o in outs]
        width = max(len(o.response_ids) for o in rows)
        mask = torch.zeros(len(rows), width)
        scores = torch.zeros(len(rows), width)
        for r, out in enumerate(rows):
            mask[r, : len(out.response_mask)] = torch.tensor(out.response_mask, dtype=torch.float)
            last = max(i for i, m in enumerate(out.response_mask) if m)
            scores[r, last] = out.reward_score
        data = DataProto.from_dict(
            tensors={"response_mask": mask, "token_level_rewards": scores},
            non_tensors={"uid": np.array(["uid0"] * len(rows), dtype=object)},
        )
        out = compute_advantage_for_multi_trajectories(data, keys, AdvantageEstimator.GRPO)
        first = out.batch["response_mask"].argmax(dim=1)
        return out.batch["advantages"][torch.arange(len(rows)), first].tolist()

    with_failed = advantages(sessions)
    without = advantages({s: o for s, o in sessions.items() if s != 2})
    assert with_failed == pytest.approx(without)
    assert [o[0].reward_score for s, o in sessions.items() if s != 2] == [1.0, 0.0, 1.0]


def test_agent_loop_workers_sized_from_the_nodes_cpus_unless_set(tmp_path, monkeypatch):
    """Our AWorld loop is CPU-bound per process: verl gets per node one agent-loop worker per core
    its GPUs leave, at least 2 per GPU and at most 32, times the nodes (at least its own 8);
    rollout.workers or the native key wins."""
    eight = {"backend": "verl", "verl": {"trainer": {"n_gpus_per_node": 8}}}
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    run = _render(trainer_for(tmp_path / "a", eight))
    assert run.final.actor_rollout_ref.rollout.agent.num_workers == 16
    monkeypatch.setattr("os.cpu_count", lambda: 30)
    run = _render(trainer_for(tmp_path / "a2", eight))
    assert run.final.actor_rollout_ref.rollout.agent.num_workers == 22
    monkeypatch.setattr("os.cpu_count", lambda: 96)
    two_nodes = {"backend": "verl", "verl": {"trainer": {"n_gpus_per_node": 8, "nnodes": 2}}}
    run = _render(trainer_for(tmp_path / "a3", two_nodes))
    assert run.final.actor_rollout_ref.rollout.agent.num_workers == 64
    run = _render(trainer_for(tmp_path / "b", {"backend": "verl", "rollout": {"workers": 3}}))
    assert run.final.actor_rollout_ref.rollout.agent.num_workers == 3
    native = {"actor_rollout_ref": {"rollout": {"agent": {"num_workers": 5}}}}
    run = _render(trainer_for(tmp_path / "c", {"backend": "verl", "verl": native}))
    assert run.final.actor_rollout_ref.rollout.agent.num_workers == 5


# -- verl's validation: the held-out evaluation of every engine --------------------------------


def test_verls_validation_is_the_runs_held_out_evaluation(tmp_path):
    """verl validates as every engine evaluates (trainer.eval_*): val_kwargs at the held-out
    temperature with n = samples per task and the rollout's top-p/top-k, before the first step and
    after the last, val.parquet's rows once per eval seed, the turn limit and seeds handed to the
    agent loop, and checkpoints with the transformers folder `aworld-train eval` loads."""
    import pyarrow.parquet as pq

    given = {
        "backend": "verl",
        "rollout": {"temperature": 0.9, "top_p": 0.95, "top_k": 40, "max_assistant_turns": 2},
        "trainer": {
            "steps": 6,
            "eval_every": 0,
            "eval_temperature": 0.0,
            "eval_k": 3,
            "eval_seeds": [1, 2],
            "eval_max_turns": 5,
        },
    }
    run = _render(trainer_for(tmp_path / "a", given))
    final = run.final
    val = final.actor_rollout_ref.rollout.val_kwargs
    assert (val.temperature, val.do_sample, val.n, val.top_p, val.top_k) == (0.0, False, 3, 0.95, 40)
    assert (final.trainer.val_before_train, final.trainer.test_freq) == (True, 6)  # and after step 6
    assert "hf_model" in final.actor_rollout_ref.actor.checkpoint.save_contents
    rows = [r["extra_info"] for r in pq.read_table(run.folder / "val.parquet").to_pylist()]
    assert [(r["split"], r["eval_seed"]) for r in rows] == [("val", 1)] * 2 + [("val", 2)] * 2
    assert [r["task_id"] for r in rows[:2]] == [r["task_id"] for r in rows[2:]]  # the test tasks, per seed
    (loop,) = yaml.safe_load(Path(final.actor_rollout_ref.rollout.agent.agent_loop_config_path).read_text())
    assert loop["held_out"] == {"temperature": 0.0, "k": 3, "seeds": [1, 2], "max_turns": 5}

    # unset: the rollout's temperature, one sample, the run's seed; no validation after unless asked
    plain = _render(
        trainer_for(tmp_path / "b", {**given, "trainer": {"steps": 6, "eval_every": 0, "eval_after": False}})
    ).final
    val = plain.actor_rollout_ref.rollout.val_kwargs
    assert (val.temperature, val.do_sample, val.n, plain.trainer.test_freq) == (0.9, True, 1, -1)
    every = {**given, "trainer": {"steps": 6, "eval_every": 2}}
    assert _render(trainer_for(tmp_path / "c", every)).final.trainer.test_freq == 2
    # no data.test: nothing held out to evaluate, as on the local backend
    bare = _render(trainer_for(tmp_path / "d", given, test_dataset=None)).final.trainer
    assert (bare.val_before_train, bare.test_freq) == (False, -1)


def test_a_native_validation_key_that_contradicts_the_held_out_settings_is_refused(tmp_path):
    given = {"backend": "verl", "trainer": {"eval_k": 3}}
    native = {"actor_rollout_ref": {"rollout": {"val_kwargs": {"n": 2}}}}
    with pytest.raises(ConfigError, match=r"val_kwargs.n=2 contradicts trainer.eval_k \(which gives 3\)"):
        _render(trainer_for(tmp_path / "a", {**given, "verl": native}))
    greedy = {"actor_rollout_ref": {"rollout": {"val_kwargs": {"temperature": 0}}}}
    with pytest.raises(ConfigError, match=r"val_kwargs.temperature=0 contradicts rollout.temperature"):
        _render(trainer_for(tmp_path / "b", {**given, "rollout": {"temperature": 0.7}, "verl": greedy}))
    with pytest.raises(ConfigError, match=r"trainer.eval_temperature=0.5 with rollout.temperature=0"):
        sampled = {"backend": "verl", "rollout": {"temperature": 0}, "trainer": {"eval_temperature": 0.5}}
        _render(trainer_for(tmp_path / "c", sampled))
    lora = {"backend": "verl", "algorithm": {"lora": {"rank": 4}}}
    contents = _render(trainer_for(tmp_path / "d", lora)).final.actor_rollout_ref.actor.checkpoint
    assert "hf_model" not in contents.save_contents  # verl would save the base under peft's names


def test_a_validation_sample_draws_from_the_seed_the_local_backend_gives_it(
    tmp_path, tokenizer, calculator_server, monkeypatch
):
    """A val.parquet row runs under the held-out settings: sample j of task t under eval seed s
    draws from derive_seed(s, t, j), as the local backend's evaluation, and each LLM call from its
    own seed, sent to verl's server; a training row's calls carry none. `acc` is verl's validation
    metric (a session without output counts 0 there)."""
    from aworld_train.rollout.policies.client import derive_seed

    monkeypatch.setenv("CALCULATOR_MCP_URL", calculator_server.url)
    config = {
        "backend": "verl",
        "model": "embedded:smollm2-135m",
        "rollout": {"tool_block": "never", "max_response_tokens": 300},
        "trainer": {"eval_seeds": [7, 8]},
        "verl": {"data": {"max_prompt_length": 1024}},
    }
    run = _render(trainer_for(tmp_path / "a", config))
    server = FakeLLMServerClient(tokenizer, calculator_reply)
    loop = instantiate_like_verl(run, tokenizer, server)
    kwargs = {**row_kwargs(run, 2, "val.parquet"), "session_id": 1}  # the first task under seed 8
    [out] = asyncio.run(loop.run({"temperature": 1.0}, **kwargs))
    episode = derive_seed(8, kwargs["extra_info"]["task_id"], 1)
    assert [call[2]["seed"] for call in server.calls] == [derive_seed(episode, 0), derive_seed(episode, 1)]
    assert out.extra_fields["reward_extra_info"]["acc"] == 1.0
    server.calls.clear()
    asyncio.run(loop.run({"temperature": 1.0}, **row_kwargs(run)))
    assert server.calls and all("seed" not in call[2] for call in server.calls)

    # the held-out turn limit: one call, where the calculator needs two
    limited = _render(trainer_for(tmp_path / "b", {**config, "trainer": {"eval_max_turns": 1}}))
    server = FakeLLMServerClient(tokenizer, calculator_reply)
    loop = instantiate_like_verl(limited, tokenizer, server)
    asyncio.run(loop.run({"temperature": 1.0}, **row_kwargs(limited, 0, "val.parquet")))
    assert len(server.calls) == 1
    asyncio.run(loop.run({"temperature": 1.0}, **row_kwargs(limited)))  # training: the rollout's limit
    assert len(server.calls) == 3
