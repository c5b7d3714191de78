"""Tiny random models in three native tool-call formats train on the local backend, and templates
that drop tool results, or whose calls no parser reads, are refused before any model loads.

The models are built from a config with the family's real chat template and vocabulary
(`tests/chat_families.py`): Qwen3.5 (XML calls, its own vocabulary), GLM-4.6 (`<arg_key>` calls,
turns ended by the next role token) and Gemma 4 (its own vocabulary; `call:NAME{key:<|"|>...<|"|>}`
calls that no hand-written parser reads: the parser derived from its template does). A random
model does not write tool calls, so the policy's `generate` is given the family's native text and
scores it with the model itself (the logprobs are the model's own); everything else is the real
run: AWorld's agent, the calculator's MCP server, the parser the template picks, the ledger, GRPO
and the checkpoint.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys

import pytest
import torch
from chat_families import ALL_CASES
from chat_tokenizers import ROOT, Case, case_tokenizer, write_model_files

from aworld_train import AgentTrainer
from aworld_train.core.errors import ConfigError
from aworld_train.rollout.policies.client import Generation
from aworld_train.rollout.policies.local import LocalPolicy
from aworld_train.rollout.tokens.calls.registry import parse_tool_calls, parser_names
from aworld_train.rollout.tokens.templates.renderer import ChatRenderer

ROWS = [{"prompt": "What is 3 + 1?", "ground_truth": 4}]
# what each family's model writes: (tool-call turn, its stop token), (answer turn, its stop token),
# and the text that opens a tool result in its prompts
NATIVE = {
    "Qwen3.5-4B": (
        "I add them.\n</think>\n\n<tool_call>\n<function=calculate>\n<parameter=expression>\n3 + 1\n"
        "</parameter>\n</function>\n</tool_call>",
        "<|im_end|>",
        "\n</think>\n\nThe answer is {n}.",
        "<|im_end|>",
        "<tool_response>",
    ),
    "GLM-4.6": (
        "\n<think></think>\n<tool_call>calculate\n<arg_key>expression</arg_key>\n<arg_value>3 + 1</arg_value>\n"
        "</tool_call>",
        "<|observation|>",
        "\n<think></think>\nThe answer is {n}.",
        "<|user|>",
        "<tool_response>",
    ),
    "google-gemma-4-31B-it": (
        '<|tool_call>call:calculate{expression:<|"|>3 + 1<|"|>}<tool_call|>',
        "<|tool_response>",
        "The answer is {n}.",
        "<turn|>",
        "<|tool_response>",
    ),
}


def _case(name):
    return next(c for c in ALL_CASES if c.name == name)


def tiny_model(case, folder):
    # a Llama: transformers loads its folder's tokenizer as saved (a Qwen2 model type would rebuild
    # any tokenizer with Qwen2's own pre-tokenizer, and Gemma 4's vocabulary is not Qwen2's)
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = case_tokenizer(case)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    write_model_files(case, tok, folder)
    return tok


def forced_generate(tok, call_text, call_stop, answer_text, answer_stop, result_opens):
    """LocalPolicy.generate that writes the family's native text, scored by the model itself."""
    answers = itertools.count()

    async def generate(self, prompt_ids, sampling):
        prompt = tok.decode(prompt_ids)
        answered_tool = prompt.rfind(result_opens) > prompt.rfind("What is 3 + 1?")
        if answered_tool:
            n = 4 if next(answers) % 2 == 0 else 5  # one right, one wrong: a group to compare
            text, stop = answer_text.format(n=n), answer_stop
        else:
            text, stop = call_text, call_stop
        ids = tok.encode(text, add_special_tokens=False) + [tok.convert_tokens_to_ids(stop)]
        with self.lock, torch.no_grad():
            logits = self.model(torch.tensor([prompt_ids + ids])).logits[0, len(prompt_ids) - 1 : -1]
        logp = torch.log_softmax(logits.float() / sampling.temperature, dim=-1)
        picked = logp.gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1)
        return Generation(ids, picked.tolist(), "stop")

    return generate


@pytest.mark.parametrize("family", list(NATIVE))
def test_one_grpo_step_parses_and_trains_the_familys_tool_calls(tmp_path, monkeypatch, family):
    case = _case(family)
    model_dir = tmp_path / "model"
    tok = tiny_model(case, model_dir)
    monkeypatch.setattr(LocalPolicy, "generate", forced_generate(tok, *NATIVE[family]))
    run = tmp_path / "run"
    cfg = {
        "model": str(model_dir),
        "agent": "aworld_train.agents.calculator:build_agent",
        "algorithm": {"group_size": 2, "lr": 1e-2},
        "rollout": {"max_new_tokens": 128, "max_assistant_turns": 3, "temperature": 1.0, "concurrency": 1},
        "data": {"batch_size": 1},
        "reward": {"fn": "aworld_train.rewards.calculator:exact_answer"},
        "trainer": {"steps": 1, "save_every": 1, "eval_every": 0, "run_dir": str(run), "log_trajectories": 2},
        "env": [{"name": "calculator"}],
    }
    if family == "google-gemma-4-31B-it":  # no hand-written parser reads its calls: the derived one does
        assert all(not parse_tool_calls(NATIVE[family][0], name).calls for name in parser_names())
        assert ChatRenderer(tok).parser == "template"
    before = {k: v.clone() for k, v in _weights(model_dir).items()}
    summary = AgentTrainer(config=cfg, train_dataset=ROWS).train()
    assert summary["steps"] == 1
    trajs = [
        json.loads(line) for line in (run / "trajectories" / "step_000001.jsonl").read_text().splitlines()
    ]
    assert [t["status"] for t in trajs] == ["ok", "ok"]
    for t in trajs:  # the call was parsed from the family's format and the calculator answered it
        (call,) = t["tool_calls"]
        assert call["name"] == "calculate" and call["arguments"] == {"expression": "3 + 1"}
        assert call["result"].strip() == "4"
    assert sorted(t["reward"] for t in trajs) == [0.0, 1.0]
    row = next(
        json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"train"' in line
    )
    assert row["tool_call_rate"] == 1.0 and row["advantage_abs_mean"] > 0
    assert row["logprob_mismatch_mean"] < 1e-4  # the ledger's mask-1 ids are what was scored
    after = _weights(run / "checkpoints" / "step_000001")
    assert any(not torch.equal(before[k], after[k]) for k in before), "the step changed no weight"


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


@pytest.fixture(scope="module")
def phi_folder(tmp_path_factory):
    """A Phi-3.5 model folder without weights: its template drops tool results."""
    folder = tmp_path_factory.mktemp("phi35")
    case = _case("microsoft-Phi-3.5-mini-instruct")
    tok = case_tokenizer(case)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2", "max_position_embeddings": 4096}))
    write_model_files(case, tok, folder)
    return folder


@pytest.fixture(scope="module")
def unreadable_folder(tmp_path_factory):
    """A model folder without weights whose template (muse-glimmer) opens a call with its tool's
    name: no text marks where a call starts, so no parser reads its calls."""
    folder = tmp_path_factory.mktemp("glimmer")
    case = Case(
        "muse-glimmer", "qwen2", specials=("<|start|>", "<|message|>", "<|eot|>", "<|eom|>"), eos="<|eot|>"
    )
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2", "max_position_embeddings": 4096}))
    write_model_files(case, case_tokenizer(case), folder)
    return folder


def _config(model, tmp_path) -> dict:
    return {
        "model": str(model),
        "agent": "aworld_train.agents.calculator:build_agent",
        "algorithm": {"group_size": 2},
        "reward": {"fn": "aworld_train.rewards.calculator:exact_answer"},
        "trainer": {"steps": 1, "run_dir": str(tmp_path / "run")},
        "env": [{"name": "calculator"}],
    }


def test_a_template_that_drops_tool_results_is_refused_before_the_model_loads(tmp_path, phi_folder):
    # the folder has no weights: any error but this one would mean the model was being loaded
    with pytest.raises(
        ConfigError, match=r"drops tool results .*no tool result would reach the model"
    ) as err:
        AgentTrainer(config=_config(phi_folder, tmp_path), train_dataset=ROWS).train()
    assert "set rollout.tool_results_as_user: true" in str(err.value)


def test_a_template_whose_calls_no_parser_reads_is_refused_before_the_model_loads(
    tmp_path, unreadable_folder
):
    """Training and evaluating refuse it, showing the template's own call and the fix."""
    trainer = AgentTrainer(config=_config(unreadable_folder, tmp_path), train_dataset=ROWS, test_dataset=ROWS)
    for attempt in (trainer.train, trainer.evaluate):
        with pytest.raises(ConfigError) as err:
            attempt()
        message = str(err.value)
        assert (
            "no tool-call parser reads this chat template's calls; it writes a call as ' to=zqfnone"
            in message
        )
        assert "no text marks where a call starts" in message and "Fix: set rollout.tool_parser" in message


def test_check_names_the_family_parser_and_stop_ids_and_fails_on_a_lossy_template(tmp_path, phi_folder):
    glm = tmp_path / "glm"
    tiny_model(_case("GLM-4.6"), glm)

    def check(model):
        return subprocess.run(
            [sys.executable, "-m", "aworld_train.facade.cli", "check", "examples/calculator/grpo_local.yaml"]
            + [f"model={model}", "rollout.tool_parser=auto", f"trainer.run_dir={tmp_path / 'run'}"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
        )

    out = check(glm)
    assert out.returncode == 0, out.stdout + out.stderr
    line = next(x for x in out.stdout.splitlines() if "chat template" in x)
    assert re.match(
        r"ok   chat template: glm-4.5 template; tool parser glm45 \(auto\); stop tokens ", line
    ), line
    assert set(line.split("stop tokens ")[1].split(", ")) == {"<|endoftext|>", "<|user|>", "<|observation|>"}
    out = check(phi_folder)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "FAIL chat template: generic template" in out.stdout and "drops tool results" in out.stdout
    assert "rollout.tool_results_as_user: true" in out.stdout


def test_check_fails_on_a_template_whose_calls_no_parser_reads(tmp_path, unreadable_folder, capsys):
    from aworld_train.facade.cli import main

    args = [f"model={unreadable_folder}", "rollout.tool_parser=auto", f"trainer.run_dir={tmp_path / 'run'}"]
    assert main(["check", str(ROOT / "examples/calculator/grpo_local.yaml"), *args]) == 2
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "chat template" in x)
    assert line.startswith("FAIL chat template: generic template; tool parser none (auto)"), out
    assert "no tool-call parser reads this chat template's calls; it writes a call as ' to=zqfnone" in line
