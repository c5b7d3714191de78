"""backend: verl on CPU: the rendered config against verl's own Hydra config, auto-fill
rules, token budgets, and verl's validation as the run's held-out evaluation. Our agent loop run by
verl's registry/instantiate path and post-processing is tests/test_verl_loop.py; the launch,
tests/test_verl_launch.py; parity with verl's ToolAgentLoop, tests/test_verl_tool_parity.py."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verl.experimental.agent_loop.agent_loop")

import yaml  # noqa: E402
from backend_support import trainer_for  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from aworld_train import AgentTrainer  # noqa: E402
from aworld_train.core.errors import ConfigError  # noqa: E402
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


def test_the_legacy_trainer_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"trainer.use_v1=false.*baseline"):
        _render(trainer_for(tmp_path, {"backend": "verl", "verl": {"trainer": {"use_v1": False}}}))


def test_prompts_that_cannot_fit_are_reported_at_render(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="aworld_train"):
        _render(trainer_for(tmp_path, {"backend": "verl", "rollout": {"max_prompt_tokens": 20}}))
    assert "training prompts are longer than data.max_prompt_length=20" in caplog.text


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
