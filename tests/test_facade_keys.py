"""One config on every engine: the facade's settings (LoRA, staleness, the importance cap, lr, group
size, KL, clip, ...) written into verl's and AReaL's own keys by each render; a native key that
agrees is kept, one that contradicts a facade key the user set is refused naming both, and what an
engine cannot honour is refused naming its limit."""

from __future__ import annotations

import pytest
from backend_support import trainer_for

from aworld_train.core.errors import ConfigError

pytest.importorskip("verl")

SETTINGS = {
    "model": "embedded:smollm2-135m",
    "algorithm": {
        "lora": {"rank": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]},
        "max_staleness": 2,
        "importance_cap": 3.0,
        "lr": 5e-4,
        "group_size": 3,
        "kl_coef": 0.05,
        "clip_low": 0.1,
        "clip_high": 0.3,
        "mini_batches": 2,
        "warmup_steps": 1,
        "grad_clip": 0.5,
        "weight_decay": 0.02,
    },
    "rollout": {"temperature": 0.9, "top_p": 0.95, "top_k": 40},
    "data": {"batch_size": 4},
    "trainer": {"steps": 6},
}


def config(backend: str, **native) -> dict:
    return {**SETTINGS, "backend": backend, **native}


def test_local_reads_the_settings_themselves(tmp_path):
    trainer = trainer_for(tmp_path, config("local"))
    algo = trainer.config.algorithm
    assert (algo.lora.rank, algo.max_staleness, algo.importance_cap) == (8, 2, 3.0)


def test_verl_gets_each_setting_in_its_own_keys(tmp_path):
    run = trainer_for(tmp_path, config("verl", trainer={"steps": 6, "save_total_limit": 2})).render()
    final = run.final
    model, actor, rollout = (
        final.actor_rollout_ref.model,
        final.actor_rollout_ref.actor,
        final.actor_rollout_ref.rollout,
    )
    assert (model.lora_rank, model.lora_alpha, list(model.target_modules)) == (8, 16, ["q_proj", "v_proj"])
    assert final.trainer.v1.trainer_mode == "colocate_async"
    assert final.trainer.v1.sampler.max_off_policy_threshold == 2
    assert final.trainer.v1.sampler.max_off_policy_strategy == "drop"
    assert final.algorithm.rollout_correction.rollout_is == "token"
    assert final.algorithm.rollout_correction.rollout_is_threshold == 3.0
    assert actor.optim.lr == 5e-4 and actor.optim.weight_decay == 0.02 and actor.optim.lr_warmup_steps == 1
    assert (actor.kl_loss_coef, actor.use_kl_loss) == (0.05, True)
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.grad_clip) == (0.1, 0.3, 0.5)
    assert actor.ppo_mini_batch_size == 2  # a batch of 4 in 2 optimizer steps
    assert (rollout.n, rollout.temperature, rollout.top_p, rollout.top_k) == (3, 0.9, 0.95, 40)
    assert final.trainer.max_actor_ckpt_to_keep == 2


def test_areal_gets_each_setting_in_its_own_keys(tmp_path):
    run = trainer_for(tmp_path, config("areal")).render()
    final = run.final
    actor = final["actor"]
    assert (actor["use_lora"], actor["lora_rank"], actor["lora_alpha"]) == (True, 8, 16)
    assert actor["target_modules"] == ["q_proj", "v_proj"]
    assert final["rollout"]["max_head_offpolicyness"] == 2
    assert actor["use_decoupled_loss"] is True
    sampling = actor["rejection_sampling"]
    assert (sampling["level"], sampling["action"], sampling["metric"], sampling["upper"]) == (
        "token",
        "clamp",
        "ratio",
        3.0,
    )
    assert 0 < sampling["lower"] < 1e-6  # no lower clamp in effect
    assert actor["optimizer"]["lr"] == 5e-4 and actor["optimizer"]["weight_decay"] == 0.02
    assert (actor["kl_ctl"], actor["eps_clip"], actor["eps_clip_higher"]) == (0.05, 0.1, 0.3)
    assert actor["ppo_n_minibatches"] == 2
    assert (final["gconfig"]["temperature"], final["gconfig"]["top_p"], final["gconfig"]["top_k"]) == (
        0.9,
        0.95,
        40,
    )


def test_all_linear_reaches_each_engine_as_it_takes_it(tmp_path):
    settings = {**SETTINGS, "algorithm": {**SETTINGS["algorithm"], "lora": {"rank": 4}}}
    verl = trainer_for(tmp_path / "v", {**settings, "backend": "verl"}).render().final
    areal = trainer_for(tmp_path / "a", {**settings, "backend": "areal"}).render().final
    assert verl.actor_rollout_ref.model.target_modules == "all-linear"
    assert areal["actor"]["target_modules"] == ["all-linear"]  # AReaL's FSDP actor reads it so


def test_a_native_key_that_agrees_is_kept_and_one_that_contradicts_is_refused_naming_both(tmp_path):
    agreeing = {
        "actor_rollout_ref": {"model": {"lora_rank": 8}},
        "trainer": {"v1": {"trainer_mode": "separate_async"}},
    }
    with pytest.raises(ConfigError, match="separate_async"):  # an unmerged adapter there: verl's own limit
        trainer_for(tmp_path / "a", config("verl", verl=agreeing)).render()
    agreeing = {"actor_rollout_ref": {"model": {"lora_rank": 8, "lora_alpha": 16}}}
    assert (
        trainer_for(tmp_path / "b", config("verl", verl=agreeing))
        .render()
        .final.actor_rollout_ref.model.lora_rank
        == 8
    )
    with pytest.raises(ConfigError) as refused:
        trainer_for(
            tmp_path / "c", config("verl", verl={"actor_rollout_ref": {"model": {"lora_rank": 32}}})
        ).render()
    assert "verl.actor_rollout_ref.model.lora_rank=32 contradicts algorithm.lora (which gives 8)" in str(
        refused.value
    )
    with pytest.raises(ConfigError) as refused:
        trainer_for(
            tmp_path / "d", config("areal", areal={"rollout": {"max_head_offpolicyness": 5}})
        ).render()
    assert (
        "areal.rollout.max_head_offpolicyness=5 contradicts algorithm.max_staleness (which gives 2)"
        in str(refused.value)
    )
    sync = {"trainer": {"v1": {"trainer_mode": "colocate_async"}}}
    explicit_sync = {
        **SETTINGS,
        "algorithm": {**SETTINGS["algorithm"], "max_staleness": 0},
        "backend": "verl",
    }
    with pytest.raises(
        ConfigError, match=r"trainer_mode='colocate_async' contradicts algorithm.max_staleness"
    ):
        trainer_for(tmp_path / "e", {**explicit_sync, "verl": sync}).render()


def test_what_an_engine_cannot_honour_is_refused_naming_its_limit(tmp_path):
    dropout = {**SETTINGS, "algorithm": {**SETTINGS["algorithm"], "lora": {"rank": 8, "dropout": 0.1}}}
    for backend in ("verl", "areal"):
        with pytest.raises(ConfigError, match=r"algorithm.lora.dropout=0.1: .* without dropout"):
            trainer_for(tmp_path / backend, {**dropout, "backend": backend})
    with pytest.raises(
        ConfigError, match=r"trainer.save_total_limit=2: AReaL's saver keeps every checkpoint"
    ):
        trainer_for(tmp_path / "limit", config("areal", trainer={"steps": 6, "save_total_limit": 2}))
    with pytest.raises(ConfigError, match=r"algorithm.mini_batches=3 does not divide data.batch_size=4"):
        odd = {**SETTINGS, "algorithm": {**SETTINGS["algorithm"], "mini_batches": 3}, "backend": "verl"}
        trainer_for(tmp_path / "odd", odd).render()
    vllm = {**SETTINGS, "rollout": {"engine": "vllm"}}
    with pytest.raises(
        ConfigError, match=r"on a GPU AReaL samples with the inference engine its allocation_mode"
    ):
        trainer_for(tmp_path / "vllm-areal", {**vllm, "backend": "areal"})
    with pytest.raises(
        ConfigError, match=r"on a GPU verl samples with its own vLLM rollout .*rollout.name: vllm"
    ):
        trainer_for(tmp_path / "vllm-verl-gpu", {**vllm, "backend": "verl"})
    separate = {
        **vllm,
        "backend": "verl",
        "verl": {"trainer": {"device": "cpu", "v1": {"trainer_mode": "separate_async"}}},
    }
    with pytest.raises(ConfigError, match=r"separate_async: its two CPU replicas would each start a vLLM"):
        trainer_for(tmp_path / "vllm-verl-separate", separate)


def test_rollout_engine_vllm_on_a_verl_cpu_run_is_the_aworld_cpu_rollouts_engine_kwargs(tmp_path):
    """Renders the config only: the facade's rollout.engine reaches verl's own extension point for an
    engine's arguments, which the `aworld_cpu` server reads (tests/test_verl_cpu_vllm_e2e.py runs it)."""
    algorithm = {k: v for k, v in SETTINGS["algorithm"].items() if k != "lora"}
    given = {
        **config("verl", verl={"trainer": {"device": "cpu"}}),
        "algorithm": algorithm,
        "rollout": {"engine": "vllm", "vllm_kv_cache_gib": 1.5},
    }
    run = trainer_for(tmp_path, given).render()
    rollout = run.final.actor_rollout_ref.rollout
    assert rollout.name == "aworld_cpu"
    assert dict(rollout.engine_kwargs.aworld_cpu) == {
        "sampler": "vllm",
        "kv_cache_gib": 1.5,
        "seed": 0,
        "run_folder": str(run.folder),
        "lora_rank": None,
    }
    # an adapter the actor trains unmerged is served as one of vLLM's, of its rank
    adapted = trainer_for(tmp_path / "lora", {**given, "algorithm": SETTINGS["algorithm"]}).render()
    assert adapted.final.actor_rollout_ref.rollout.engine_kwargs.aworld_cpu.lora_rank == 8
    plain = trainer_for(tmp_path / "plain", {**given, "rollout": {}}).render()
    assert "aworld_cpu" not in plain.final.actor_rollout_ref.rollout.engine_kwargs


def test_rollout_engine_vllm_on_an_areal_cpu_run_is_areals_vllm_client_and_our_front(tmp_path):
    """Renders the config only: AReaL's client becomes its vLLM backend, and the entry point is told to
    start vLLM's server behind AReaL's vLLM routes (tests/test_areal_cpu_vllm_e2e.py runs it)."""
    import yaml

    algorithm = {k: v for k, v in SETTINGS["algorithm"].items() if k != "lora"}
    given = {
        **config("areal", areal={"cluster": {"n_gpus_per_node": 0}}),
        "algorithm": algorithm,
        "rollout": {"engine": "vllm", "max_total_tokens": 1024},
    }
    run = trainer_for(tmp_path, given).render()
    assert run.final["rollout"]["backend"] == "vllm:d1"
    workflow = yaml.safe_load((run.folder / "workflow.yaml").read_text())
    assert workflow["cpu_server"] == {
        "model": run.final["actor"]["path"],
        "sampler": "vllm",
        "max_len": 1024,
        "seed": 0,
        "kv_cache_gib": 2.0,
        "lora_rank": None,
    }
    adapted = trainer_for(tmp_path / "lora", {**given, "algorithm": SETTINGS["algorithm"]}).render()
    assert yaml.safe_load((adapted.folder / "workflow.yaml").read_text())["cpu_server"]["lora_rank"] == 8
    plain = trainer_for(tmp_path / "plain", {**given, "rollout": {}}).render()
    assert plain.final["rollout"]["backend"] == "sglang:d1"


def test_each_engine_declares_what_it_can_do():
    from aworld_train.engines import get_engine

    capabilities = {name: get_engine(name).capabilities for name in ("local", "verl", "areal")}
    assert {name for name, c in capabilities.items() if c.sft} == {"local", "verl"}
    assert {name for name, c in capabilities.items() if c.vllm_sampler} == {"local", "verl", "areal"}
    assert {name for name, c in capabilities.items() if c.turn_advantages} == {"local", "verl", "areal"}
    with pytest.raises(ConfigError, match="sft.backend: areal does not fine-tune; use local or verl"):
        get_engine("areal").sft(None, None, None)


def test_an_engine_without_advantages_per_turn_refuses_them_naming_the_way_out():
    from aworld_train.engines.protocol import Capabilities, refuse_what_it_cannot
    from aworld_train.inputs.config import TrainConfig
    from aworld_train.inputs.policy_plan import resolve_plan

    class OneRewardPerRow:  # what refuse_what_it_cannot reads of an engine
        name = "rows"
        capabilities = Capabilities()

    config = TrainConfig.model_validate({"algorithm": {"advantage": "discounted"}})
    with pytest.raises(
        ConfigError, match="algorithm.advantage: discounted: backend rows gives each row one reward"
    ):
        refuse_what_it_cannot(OneRewardPerRow(), config, resolve_plan({}, config.algorithm))  # type: ignore[arg-type]
    default = TrainConfig.model_validate({})
    refuse_what_it_cannot(OneRewardPerRow(), default, resolve_plan({}, default.algorithm))  # type: ignore[arg-type]
