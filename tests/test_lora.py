"""LoRA on the local backend: only the adapter trains, the rollout samples from base + adapter (and
the mismatch metric says when it does not), checkpoints keep the adapter and its optimizer state, and
the run's last checkpoint is a merged plain model."""

import asyncio
import copy
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from aworld_train.core.errors import ConfigError
from aworld_train.engines.local import lora
from aworld_train.engines.local.display import step_line
from aworld_train.engines.local.learner import GRPOLearner
from aworld_train.engines.local.samples import build_samples
from aworld_train.engines.logprob_mismatch import mismatch_warning
from aworld_train.inputs.config import AlgorithmConfig, LoraConfig, load_config
from aworld_train.rollout.episodes.single_turn import sample_groups
from aworld_train.rollout.policies import checkpoint_layout as layout
from aworld_train.rollout.policies.client import SamplingParams
from aworld_train.rollout.policies.local import LocalPolicy
from aworld_train.rollout.policies.models import load_model

SETTINGS = LoraConfig(rank=4, alpha=8)
TOLERANCE = AlgorithmConfig().mismatch_tolerance


def first_token_reward(half: int):
    return lambda prompt, gen: 1.0 if gen.token_ids and gen.token_ids[0] < half else 0.0


def lora_setup(tiny_model_dir, tokenizer, stop_ids, **algo):
    torch.manual_seed(0)
    model = lora.attach(load_model(str(tiny_model_dir), dtype=torch.float32), SETTINGS)
    policy = LocalPolicy(model, tokenizer, stop_ids)
    config = AlgorithmConfig(group_size=4, lr=5e-3, micro_batch_tokens=4096, lora=SETTINGS, **algo)
    learner = GRPOLearner(model, config, temperature=1.0, pad_id=policy.pad_id, lock=policy.weights_update)
    return model, policy, learner


def rollout(policy, tokenizer, seed):
    prompts = [tokenizer.encode(f"Pick a word number {i}:") for i in range(4)]
    sampling = SamplingParams(max_new_tokens=3, temperature=1.0, seed=seed)
    trajs = asyncio.run(sample_groups(policy, prompts, 4, sampling, first_token_reward(len(tokenizer) // 2)))
    return build_samples(trajs, [t.task_id for t in trajs])[0]


def test_only_the_adapter_trains_and_the_rollout_samples_from_it(tiny_model_dir, tokenizer, stop_ids):
    model, policy, learner = lora_setup(tiny_model_dir, tokenizer, stop_ids)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    base_before = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    adapter_before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    for step in range(2):
        metrics = learner.step(rollout(policy, tokenizer, seed=step))
        # step 2 samples after step 1's update: base + the trained adapter, as the learner computes
        assert metrics["logprob_mismatch_tokens"] > 0 and metrics["logprob_mismatch_mean"] < 1e-4, metrics
        assert mismatch_warning(metrics, TOLERANCE) is None
    after = dict(model.named_parameters())
    assert all(torch.equal(after[n], w) for n, w in base_before.items())
    assert any(not torch.equal(after[n], w) for n, w in adapter_before.items())
    assert policy.version == 2


def test_gradient_checkpointing_still_reaches_the_adapter(tiny_model_dir, tokenizer, stop_ids):
    """The demo's setting: checkpointed blocks of a model whose embedding is frozen (transformers'
    non-reentrant checkpointing needs no input that requires grad)."""
    model, policy, learner = lora_setup(tiny_model_dir, tokenizer, stop_ids, gradient_checkpointing=True)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    metrics = learner.step(rollout(policy, tokenizer, seed=0))
    assert metrics["grad_norm"] > 0
    assert any(not torch.equal(p, before[n]) for n, p in model.named_parameters() if n in before)


def test_a_rollout_without_the_adapter_shows_as_mismatch_and_warns(tiny_model_dir, tokenizer, stop_ids):
    model, policy, learner = lora_setup(tiny_model_dir, tokenizer, stop_ids)
    learner.step(rollout(policy, tokenizer, seed=0))
    with torch.no_grad():  # an adapter far from zero, so that leaving it out shows
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    with model.disable_adapter():  # the adapter not delivered: the rollout samples from the base
        samples = rollout(policy, tokenizer, seed=1)
    metrics = learner.step(samples)
    assert metrics["logprob_mismatch_mean"] > TOLERANCE, metrics
    line = step_line(
        2,
        3,
        {**metrics, "reward_mean": 0.5, "success_rate": 0.5, "tool_call_rate": 0.0, "step_s": 1.0},
        TOLERANCE,
    )
    assert f"logprob mismatch {metrics['logprob_mismatch_mean']:.4f}" in line
    assert (
        "WARNING" in line and "LoRA adapter" in line and f"algorithm.mismatch_tolerance={TOLERANCE}" in line
    )


def test_the_kl_reference_is_the_base_without_the_adapter(tiny_model_dir, tokenizer, stop_ids):
    model, policy, learner = lora_setup(tiny_model_dir, tokenizer, stop_ids, kl_coef=0.1)
    assert learner.ref_model is None and learner.has_reference  # no second copy of the model
    learner.step(rollout(policy, tokenizer, seed=0))
    learner.step(rollout(policy, tokenizer, seed=1))
    base = load_model(str(tiny_model_dir), dtype=torch.float32)
    ids = torch.tensor([tokenizer.encode("Pick a word number 3: the")])
    batch = {"ids": ids, "attention": torch.ones_like(ids), "mask": torch.ones(1, ids.shape[1] - 1)}
    reference = learner._reference_logprobs(batch)
    assert torch.allclose(reference, learner._logprobs(base, batch), atol=1e-5)
    with torch.no_grad():
        assert not torch.allclose(
            reference, learner._logprobs(model, batch), atol=1e-5
        )  # the adapter trained


def test_a_merged_export_is_a_plain_model_with_the_same_logits(tiny_model_dir, tokenizer, stop_ids, tmp_path):
    model, policy, learner = lora_setup(tiny_model_dir, tokenizer, stop_ids)
    learner.step(rollout(policy, tokenizer, seed=0))
    checkpoint = tmp_path / "checkpoints" / "step_000001"
    layout.save_adapter(model, checkpoint)
    out = lora.export_merged(str(tiny_model_dir), checkpoint, tmp_path / "merged", tokenizer, torch.float32)
    assert (out / "config.json").is_file() and not (out / "adapter_config.json").exists()
    merged = load_model(str(out), dtype=torch.float32)
    assert not any("lora" in n for n, _ in merged.named_parameters())
    ids = torch.tensor([tokenizer.encode("What is 2 + 3?")])
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, model(ids).logits, atol=1e-4)


def test_lora_settings_are_checked_with_the_field_and_the_fix(tiny_model_dir):
    with pytest.raises(ConfigError, match=r"algorithm\.lora\.rank.*greater than or equal to 1"):
        load_config({"algorithm": {"lora": {"rank": 0}}})
    with pytest.raises(ConfigError, match=r"algorithm\.lora\.dropout"):
        load_config({"algorithm": {"lora": {"dropout": 1.5}}})
    with pytest.raises(ConfigError, match=r"algorithm\.lora\.target_modules.*all-linear"):
        load_config({"algorithm": {"lora": {"target_modules": []}}})
    with pytest.raises(
        ConfigError, match=r"unknown config key .algorithm\.lora\.ranks.; remove it or fix its spelling"
    ):
        load_config({"algorithm": {"lora": {"ranks": 8}}})
    cfg = load_config({"algorithm": {"lora": {"rank": 8}}})
    assert cfg.algorithm.lora == LoraConfig(rank=8)
    model = load_model(str(tiny_model_dir), dtype=torch.float32)
    with pytest.raises(
        ConfigError, match=r"algorithm\.lora\.target_modules=\['qkv'\].*q_proj.*or write all-linear"
    ):
        lora.attach(model, LoraConfig(target_modules=["qkv"]))


# -- a run through the local backend --------------------------------------------------------------


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, tiny_model_dir):
    """A 2-step LoRA run, shared: read it, or resume a deep copy of its config into a new folder."""
    from test_local_backend import ROWS, config

    from aworld_train import AgentTrainer

    cfg = config(tmp_path_factory.mktemp("lora-run"), tiny_model_dir, 2)
    cfg["algorithm"]["lora"] = {"rank": 4, "alpha": 8}
    cfg["reward"] = {"fn": "reward_fixtures:text_length"}
    cfg["trainer"]["eval_before"] = cfg["trainer"]["eval_after"] = False
    summary = AgentTrainer(config=copy.deepcopy(cfg), train_dataset=ROWS, test_dataset=ROWS[:2]).train()
    return copy.deepcopy(cfg), summary


def test_a_lora_run_saves_adapters_and_a_merged_last_step_and_resumes(lora_run, tiny_model_dir):
    from test_local_backend import ROWS

    from aworld_train import AgentTrainer
    from aworld_train.engines.local.training import LocalTraining

    cfg, summary = copy.deepcopy(lora_run[0]), lora_run[1]
    run = Path(cfg["trainer"]["run_dir"])
    first, last = run / "checkpoints" / "step_000001", run / "checkpoints" / "step_000002"
    # every checkpoint: the adapter (not the model) and the optimizer state; the last: the merged model too
    assert layout.has_adapter(first) and not (first / "config.json").exists()
    assert not list(first.glob("*.safetensors"))
    assert layout.has_adapter(last) and (last / "config.json").is_file()
    assert summary["adapter_mb"] == round(layout.adapter_bytes(last) / 2**20, 2) > 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if r["phase"] == "train"]
    assert all(r["logprob_mismatch_mean"] < 1e-3 for r in train_rows)
    # the merged model is a plain `model:`: base + adapter, without peft
    merged = load_model(str(last), dtype=torch.float32)
    assert not any("lora" in n for n, _ in merged.named_parameters())

    # --resume: the adapter and its optimizer state as saved
    saved = torch.load(last / "trainer_state.pt", weights_only=False)
    cfg["trainer"]["steps"] = 3
    resumed = LocalTraining(
        AgentTrainer(config=copy.deepcopy(cfg), train_dataset=ROWS, test_dataset=ROWS[:2]).run_inputs(),
        resume=True,
    )
    adapter = load_file(last / "adapter" / "adapter_model.safetensors")
    weights = {n: p for n, p in resumed.model.named_parameters() if p.requires_grad}
    assert len(weights) == len(adapter)
    for name, tensor in adapter.items():
        match = [p for n, p in weights.items() if n.replace(".default", "") == name]
        assert len(match) == 1 and torch.equal(match[0].detach(), tensor), name
    state = resumed.learner.optimizer.state_dict()["state"]
    assert state and all(
        torch.equal(state[i]["exp_avg"], saved["learner"]["optimizer"]["state"][i]["exp_avg"]) for i in state
    )
    assert resumed.start_step == 2


def test_a_resume_that_does_not_match_the_saved_adapter_is_refused(lora_run):
    from test_local_backend import ROWS

    from aworld_train import AgentTrainer

    cfg = copy.deepcopy(lora_run[0])
    del cfg["algorithm"]["lora"]
    cfg["trainer"]["steps"] = 3
    with pytest.raises(ConfigError, match=r"holds a LoRA adapter.*resume it with the same algorithm\.lora"):
        AgentTrainer(config=copy.deepcopy(cfg), train_dataset=ROWS, test_dataset=ROWS[:2]).train(resume=True)
    cfg["algorithm"]["lora"] = {"rank": 8, "alpha": 8}  # the run's adapter has rank 4
    with pytest.raises(
        ConfigError, match=r"algorithm\.lora\.rank=8, but .* rank 4: .*set algorithm\.lora\.rank: 4"
    ):
        AgentTrainer(config=cfg, train_dataset=ROWS, test_dataset=ROWS[:2]).train(resume=True)


def test_export_merges_a_checkpoint_into_a_plain_model_folder(lora_run, tmp_path, capsys):
    from aworld_train.facade.cli import main

    cfg = lora_run[0]
    run = Path(cfg["trainer"]["run_dir"])
    out = tmp_path / "merged"
    # a run folder: its latest checkpoint; the base is the run's config.yaml model
    assert main(["export", str(run), str(out)]) == 0
    merged = load_model(str(out), dtype=torch.float32)
    adapted = lora.load(load_model(cfg["model"], dtype=torch.float32), run / "checkpoints" / "step_000002")
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, adapted(ids).logits, atol=1e-4)
    # bad input: named, before any model loads
    assert main(["export", str(run / "checkpoints" / "step_000001"), str(out)]) == 2
    assert f"{out} exists and is not empty" in capsys.readouterr().err
    plain = tmp_path / "plain"
    plain.mkdir()
    assert main(["export", str(plain), str(tmp_path / "other")]) == 2
    assert "holds no LoRA adapter" in capsys.readouterr().err


# -- what other backends cannot honour, refused before anything loads ------------------------------


def test_a_lora_setting_a_backend_cannot_honour_is_refused_with_the_fix():
    from aworld_train.engines import get_engine

    def validate(data):
        cfg = load_config(data)
        get_engine(cfg.backend).validate(cfg)

    # verl's own refusals of what its rollout cannot honour: tests/test_verl_lora.py; the facade's
    # key is verl's and AReaL's too (tests/test_facade_keys.py)
    validate({"backend": "verl", "algorithm": {"lora": {"rank": 8}}})
    cpu_areal = {"cluster": {"n_gpus_per_node": 0}, "actor": {"use_lora": True}}
    validate({"backend": "areal", "areal": cpu_areal})  # the CPU policy server serves AReaL's adapters
    for native, fix in (
        ({"rollout": {"use_lora": False}}, r"rollout\.use_lora: false .*remove rollout\.use_lora"),
        ({"gconfig": {"lora_name": ""}}, r"gconfig\.lora_name is empty .*default_lora"),
    ):
        with pytest.raises(ConfigError, match=fix):
            validate({"backend": "areal", "areal": {**cpu_areal, **native}})
    with pytest.raises(ConfigError, match=r"rollout\.use_lora: true without areal\.actor\.use_lora"):
        validate(
            {"backend": "areal", "areal": {"cluster": {"n_gpus_per_node": 0}, "rollout": {"use_lora": True}}}
        )
    validate({"backend": "areal", "algorithm": {"lora": {}}})
    with pytest.raises(ConfigError, match=r"rollout\.use_lora: false .*remove rollout\.use_lora"):
        # the facade's adapter, which the CPU policy server must be asked for
        cpu = {"cluster": {"n_gpus_per_node": 0}, "rollout": {"use_lora": False}}
        validate({"backend": "areal", "algorithm": {"lora": {"rank": 8}}, "areal": cpu})
