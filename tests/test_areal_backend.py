"""backend: areal, in our environment: translation of the common config and the precedence
rules, the run folder and the launch. The CPU switch and our policy server: tests/test_areal_cpu.py.
Our workflow driven by AReaL's own classes, AReaL's trainer on a CPU and AReaL's config loader run
in AReaL's environment (tests/areal_env/, tests/test_areal_cpu_e2e.py, tests/test_areal_loader.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from backend_support import REWARD, ROWS, trainer_for, workflow_kwargs

from aworld_train import AgentTrainer
from aworld_train.core.errors import ConfigError
from aworld_train.engines.areal.render import derived_values
from aworld_train.rollout.samples.codec import TASK_FIELD, task_from_json

ROOT = Path(__file__).resolve().parents[1]


def _render(trainer):
    """The engine's run folder, written through the facade as `aworld-train render` does."""
    return trainer.render()


def get(tree, dotted):
    for part in dotted.split("."):
        tree = tree[part]
    return tree


def rendered(run, key: str):
    """An AReaL key of the final config; `workflow:`, `eval:`, `held_out:` keys are our workflow's
    kwargs, its evaluation's and the trainer's evaluations (workflow.yaml)."""
    section, _, name = key.rpartition(":")
    if not section:
        return get(run.final, key)
    workflow = yaml.safe_load((run.folder / "workflow.yaml").read_text())
    return {
        "workflow": workflow["kwargs"],
        "eval": workflow["eval_kwargs"],
        "held_out": workflow["held_out"],
    }[section][name]


# -- translation ----------------------------------------------------------------------------------


def test_calculator_example_renders_for_verl_and_areal_with_only_the_backend_key_changed(tmp_path):
    pytest.importorskip("verl")
    verl_yaml = yaml.safe_load((ROOT / "examples/calculator/grpo_verl.yaml").read_text())
    areal_yaml = yaml.safe_load((ROOT / "examples/calculator/grpo_areal.yaml").read_text())
    assert areal_yaml.pop("backend") == "areal" and verl_yaml.pop("backend") == "verl"
    assert areal_yaml == verl_yaml

    def trainer(name):
        return AgentTrainer(
            config=str(ROOT / f"examples/calculator/grpo_{name}.yaml"),
            overrides=[f"trainer.run_dir={tmp_path / name}"],
        )

    on_verl, on_areal = trainer("verl"), trainer("areal")
    assert on_areal.spec.model_dump() == on_verl.spec.model_dump()
    assert on_areal.reward.reference == on_verl.reward.reference
    assert on_areal.train_tasks == on_verl.train_tasks and len(on_areal.train_tasks) > 0
    v = on_verl.render().final
    areal_run = on_areal.render()
    a = areal_run.final
    assert a["actor"]["path"] == v.actor_rollout_ref.model.path
    assert workflow_kwargs(areal_run)["group_size"] == v.actor_rollout_ref.rollout.n == 4
    assert a["actor"]["optimizer"]["lr"] == v.actor_rollout_ref.actor.optim.lr == 2.0e-5
    assert a["actor"]["eps_clip_higher"] == v.actor_rollout_ref.actor.clip_ratio_high == 0.28
    assert a["train_dataset"]["batch_size"] == v.data.train_batch_size == 8
    assert a["total_train_steps"] == v.trainer.total_training_steps == 20
    written = (tmp_path / "areal/areal/train.jsonl").read_text().splitlines()
    assert len(written) == len(on_areal.train_tasks)


# (common override, AReaL key, expected value) for every common key the translation reads;
# "workflow:" keys are our workflow's kwargs (it runs and normalises each task's group itself)
COMMON = [
    ("algorithm.group_size=6", "workflow:group_size", 6),
    ("algorithm.norm_adv_by_std=false", "workflow:norm_by_std", False),
    ("algorithm.lr=3e-6", "actor.optimizer.lr", 3e-6),
    ("algorithm.kl_coef=0.05", "actor.kl_ctl", 0.05),
    ("algorithm.clip_low=0.1", "actor.eps_clip", 0.1),
    ("algorithm.clip_high=0.3", "actor.eps_clip_higher", 0.3),
    ("algorithm.warmup_steps=5", "actor.optimizer.warmup_steps_proportion", 0.25),
    ("algorithm.grad_clip=0.5", "actor.optimizer.gradient_clipping", 0.5),
    ("algorithm.weight_decay=0.01", "actor.optimizer.weight_decay", 0.01),
    ("algorithm.micro_batch_tokens=2048", "actor.mb_spec.max_tokens_per_mb", 2048),
    ("algorithm.mini_batches=2", "actor.ppo_n_minibatches", 2),
    ("algorithm.gradient_checkpointing=true", "actor.gradient_checkpointing", True),
    ("rollout.max_new_tokens=64", "gconfig.max_new_tokens", 64),
    ("rollout.max_new_tokens=64", "actor.max_new_tokens", 64),
    ("rollout.temperature=0.7", "gconfig.temperature", 0.7),
    ("rollout.temperature=0.7", "actor.temperature", 0.7),
    ("rollout.top_p=0.9", "gconfig.top_p", 0.9),
    ("rollout.concurrency=5", "rollout.max_concurrent_rollouts", 5),
    ("data.batch_size=2", "train_dataset.batch_size", 2),
    ("data.batch_size=2", "valid_dataset.batch_size", 2),
    ("data.batch_size=2", "rollout.consumer_batch_size", 2),
    ("trainer.steps=20", "total_train_steps", 20),
    ("trainer.steps=20", "total_train_epochs", 10),  # 20 steps x 2 tasks / 4 rows
    ("trainer.save_every=7", "saver.freq_steps", 7),
    ("trainer.save_every=0", "saver.freq_steps", None),
    ("trainer.eval_every=3", "evaluator.freq_steps", 3),
    ("trainer.eval_k=3", "eval:group_size", 3),
    ("trainer.eval_temperature=0.2", "eval_gconfig.temperature", 0.2),
    ("trainer.eval_before=false", "held_out:before", False),
    ("trainer.eval_after=false", "held_out:after", False),
    ("trainer.seed=11", "seed", 11),
]


@pytest.mark.parametrize(("override", "key", "expected"), COMMON)
def test_every_common_key_is_translated(tmp_path, override, key, expected):
    overrides = [override] + (["data.batch_size=2"] if key == "total_train_epochs" else [])
    run = _render(trainer_for(tmp_path, {"backend": "areal"}, overrides=overrides))
    value = rendered(run, key)
    assert value == pytest.approx(expected) if isinstance(expected, float) else value == expected


def test_areals_evaluator_is_rendered_from_the_held_out_settings(tmp_path):
    """One held-out evaluation on every engine: AReaL's evaluation samples k times a task under each
    held-out seed, at the held-out temperature and turn limit, generating otherwise as training does;
    the trainer evaluates before any update and after the last (AReaL's own `eval_before_train`,
    after the first update, is off), AReaL's evaluator every `eval_every` steps between."""
    overrides = [
        "trainer.eval_k=3",
        "trainer.eval_seeds=[4, 7]",
        "trainer.eval_temperature=0.2",
        "trainer.eval_max_turns=1",
        "trainer.eval_every=2",
        "rollout.temperature=0.9",
        "algorithm.lora.rank=8",
    ]
    native = {"gconfig": {"lora_name": "calc"}}  # the adapter the requests name: evaluation's too
    run = _render(trainer_for(tmp_path, {"backend": "areal", "areal": native}, overrides=overrides))
    final = run.final
    assert final["evaluator"] == {**final["evaluator"], "freq_steps": 2, "eval_before_train": False}
    # AReaL submits each task once (n_samples 1): the workflow runs its k samples
    assert final["eval_gconfig"] == {**final["gconfig"], "temperature": 0.2}
    assert final["eval_gconfig"]["lora_name"] == "calc" and final["eval_gconfig"]["n_samples"] == 1
    workflow = yaml.safe_load((run.folder / "workflow.yaml").read_text())
    assert workflow["held_out"] == {"before": True, "after": True}
    held = workflow["eval_kwargs"]
    assert held["group_size"] == 3 and held["eval_seeds"] == [4, 7]
    trained = workflow["kwargs"]["rollout"]
    assert held["rollout"] == {**trained, "temperature": 0.2, "max_assistant_turns": 1}
    assert trained["temperature"] == 0.9

    # the defaults: one sample at the rollout's temperature under the run's seed
    plain = _render(trainer_for(tmp_path / "plain", {"backend": "areal"}, overrides=["trainer.seed=5"]))
    held = yaml.safe_load((plain.folder / "workflow.yaml").read_text())["eval_kwargs"]
    assert held["group_size"] == 1 and held["eval_seeds"] == [5]
    assert plain.final["eval_gconfig"]["temperature"] == plain.final["gconfig"]["temperature"]


def test_a_run_without_test_tasks_evaluates_nothing(tmp_path):
    """AReaL evaluates its valid dataset: without test tasks it is empty (not the train tasks), and the
    trainer adds no evaluation; AReaL's own evaluation before training is refused (after an update)."""
    run = _render(trainer_for(tmp_path, {"backend": "areal"}, test_dataset=None))
    assert Path(run.final["valid_dataset"]["path"]).read_text() == ""
    assert yaml.safe_load((run.folder / "workflow.yaml").read_text())["held_out"] == {
        "before": False,
        "after": False,
    }
    native = {"evaluator": {"eval_before_train": True}}
    with pytest.raises(ConfigError, match=r"areal\.evaluator\.eval_before_train: .*\(trainer\.eval_before"):
        _render(trainer_for(tmp_path, {"backend": "areal", "areal": native}))


def test_the_entry_point_gives_the_trainer_and_the_evaluation_the_rendered_settings(tmp_path):
    """main.py: the trainer's class attributes (the mismatch tolerance, the evaluations it adds) and
    the evaluation's workflow kwargs, as workflow.yaml has them."""
    from aworld_train.engines.areal.main import trainer_settings

    run = _render(trainer_for(tmp_path, {"backend": "areal"}, overrides=["trainer.eval_before=false"]))
    workflow = yaml.safe_load((run.folder / "workflow.yaml").read_text())
    assert trainer_settings(workflow) == {"mismatch_tolerance": 0.1, "eval_before": False, "eval_after": True}


def test_model_data_and_reward_reach_the_run_folder(tmp_path):
    from aworld_train.rollout.policies.models import resolve_model_path

    run = _render(trainer_for(tmp_path, {"backend": "areal", "algorithm": {"kl_coef": 0.1}}))
    model = str(resolve_model_path("embedded:smollm2-135m"))
    final = run.final
    assert final["actor"]["path"] == final["tokenizer_path"] == final["ref"]["path"] == model
    assert final["scheduler"]["type"] == "local" and final["actor"]["backend"] == "fsdp:d1"
    # the workflow runs and normalises each task's group: AReaL's own group machinery is off
    assert "reward_norm" not in final["actor"] and final["gconfig"]["n_samples"] == 1
    assert workflow_kwargs(run)["group_size"] == 4 and workflow_kwargs(run)["norm_by_std"] is True
    assert final["saver"]["fileroot"] == "${cluster.fileroot}"
    rows = [yaml.safe_load(line) for line in Path(final["train_dataset"]["path"]).read_text().splitlines()]
    assert [task_from_json(r[TASK_FIELD]).user_turns for r in rows] == [[r["prompt"]] for r in ROWS]
    assert len(Path(final["valid_dataset"]["path"]).read_text().splitlines()) == 2
    workflow = yaml.safe_load((run.folder / "workflow.yaml").read_text())
    assert workflow["workflow"] == "aworld_train.engines.areal.workflow.AWorldWorkflow"
    assert workflow["kwargs"]["reward"] == REWARD and Path(workflow["kwargs"]["spec_path"]).is_file()
    assert yaml.safe_load(run.config_path.read_text()) == final
    assert run.command[1:3] == ("-m", "aworld_train.engines.areal.main")


def _different(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value * 2 + 1
    if value is None:
        return "batch"
    return f"{value}-other"


def _contradicting():
    """Every derived value that comes from a common field: (areal key, common field)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        items = derived_values(
            trainer_for(Path(tmp), {"backend": "areal"}).run_inputs(), Path(tmp), "/models/m"
        )
    return sorted({(d.key, d.common) for d in items if d.common})


@pytest.mark.parametrize(("key", "common"), _contradicting())
def test_each_contradiction_is_an_error(tmp_path, key, common):
    """The common field set by the user and a different native value: an error naming both."""
    trainer = trainer_for(tmp_path, {"backend": "areal"})
    section, _, field = common.partition(".")
    mine = {"model": "embedded:smollm2-135m"} if common == "model" else {section: {field: None}}
    if field:
        mine[section][field] = getattr(getattr(trainer.config, section), field)
    derived = {d.key: d.value for d in derived_values(trainer.run_inputs(), tmp_path / "run" / "areal", "m")}
    native: dict = {}
    node = native
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = _different(derived[key])
    with pytest.raises(ConfigError, match=rf"areal\.{key}=.* contradicts {common}"):
        _render(trainer_for(tmp_path, {"backend": "areal", **mine, "areal": native}))


def test_a_native_value_wins_when_the_common_field_is_left_at_its_default(tmp_path):
    native = {"actor": {"optimizer": {"lr": 3.0e-6}, "backend": "fsdp:d2"}, "gconfig": {"n_samples": 8}}
    run = _render(trainer_for(tmp_path, {"backend": "areal", "areal": native}))
    assert run.final["actor"]["optimizer"]["lr"] == 3.0e-6 and workflow_kwargs(run)["group_size"] == 8
    assert run.final["actor"]["backend"] == "fsdp:d2"
    agree = {"backend": "areal", "algorithm": {"group_size": 8}, "areal": {"gconfig": {"n_samples": 8}}}
    assert workflow_kwargs(_render(trainer_for(tmp_path, agree)))["group_size"] == 8


def test_areals_own_group_normalisation_is_refused(tmp_path):
    native = {"actor": {"reward_norm": {"mean_level": "group", "std_level": "group", "group_size": 4}}}
    with pytest.raises(ConfigError, match=r"areal\.actor\.reward_norm: .* leaving failed episodes out"):
        _render(trainer_for(tmp_path, {"backend": "areal", "areal": native}))


def test_unknown_native_key_is_an_error_with_a_hint(tmp_path):
    config = {"backend": "areal", "areal": {"actor": {"eps_clp": 0.1}}}
    with pytest.raises(
        ConfigError, match=r"areal.actor.eps_clp is not a key of AReaL's GRPOConfig.*actor.eps_clip"
    ):
        _render(trainer_for(tmp_path, config))


def test_cli_render_writes_the_run_folder_and_shows_the_result(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "aworld_train.facade.cli",
            "render",
            "examples/calculator/grpo_areal.yaml",
            f"trainer.run_dir={tmp_path / 'run'}",
            "algorithm.group_size=8",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    shown = yaml.safe_load(out.stdout)
    assert shown["gconfig"]["n_samples"] == 1 and shown["scheduler"]["type"] == "local"
    kwargs = yaml.safe_load((tmp_path / "run/areal/workflow.yaml").read_text())["kwargs"]
    assert kwargs["group_size"] == 8
    assert (
        tmp_path / "run/areal/areal_config.yaml"
    ).is_file() and "aworld_train.engines.areal.main" in out.stderr


# -- launch -------------------------------------------------------------------------------------------


def test_a_failed_launch_is_an_error_that_names_the_log(tmp_path, monkeypatch, capsys):
    """`train()` starts AReaL's entry point in a subprocess and streams its output into areal.log;
    an exit status other than 0 is an error naming the log. (The command itself is replaced.)"""
    from aworld_train.core.errors import EngineFailed
    from aworld_train.engines.areal import render as areal_render
    from aworld_train.prerun import checks as preflight

    monkeypatch.setattr(preflight, "require_checks", lambda inputs, engine, run: None)  # no AReaL here
    monkeypatch.setattr(
        areal_render,
        "command",
        lambda config_path: (sys.executable, "-c", "print('Train step 1/1 reward 0.5'); raise SystemExit(3)"),
    )
    log = tmp_path / "run" / "areal.log"
    with pytest.raises(
        EngineFailed,
        match=rf"(?s)areal exited with status 3.*{re.escape(str(log))}.*Train step 1/1 reward 0.5",
    ):
        trainer_for(tmp_path, {"backend": "areal"}).train()
    assert "Train step 1/1 reward 0.5" in log.read_text()
    assert "Train step 1/1 reward 0.5" in capsys.readouterr().err


def test_the_gpu_smoke_script_renders(tmp_path):
    """scripts/gpu/areal_smoke.sh: valid bash, and its overrides render against AReaL's keys."""
    script = ROOT / "scripts/gpu/areal_smoke.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    overrides = [w.strip("\\") for w in script.read_text().split() if w.startswith("areal.")]
    assert overrides
    trainer = AgentTrainer(
        config=str(ROOT / "examples/calculator/grpo_areal.yaml"),
        overrides=[*overrides, f"trainer.run_dir={tmp_path / 'run'}", "data.batch_size=4", "trainer.steps=1"],
    )
    final = _render(trainer).final
    assert final["cluster"]["n_gpus_per_node"] == 1 and final["total_train_steps"] == 1
    # one GPU shared by the actor and SGLang
    assert final["actor"]["weight_update_mode"] == "disk" and final["sglang"]["mem_fraction_static"] == 0.4
    assert final["sglang"]["context_length"] == 8192  # SmolLM2's, not SGLang's 32768


# -- launch defects found against AReaL 1.0.4's source ------------------------------------------------


def test_every_worker_gets_a_gpu_and_sglang_serves_the_actors_model(tmp_path):
    """AReaL's scheduler gives a worker CUDA_VISIBLE_DEVICES="" for its default spec (gpu: 0), a spec
    written in YAML needs its cmd, and SGLang's model_path is empty unless set."""
    final = _render(trainer_for(tmp_path, {"backend": "areal"})).final
    model = final["actor"]["path"]
    worker = {
        "cmd": "python -m aworld_train.engines.areal.worker",
        "env_vars": {"AWORLD_TRAIN_AREAL_MODEL": model},
    }
    assert final["actor"]["scheduling_spec"] == [{"gpu": 1, **worker}]
    assert final["rollout"]["scheduling_spec"] == "${actor.scheduling_spec}"
    assert final["sglang"]["model_path"] == final["actor"]["path"]
    assert final["actor"]["attn_impl"] == "sdpa" and final["sglang"]["disable_radix_cache"] is False
    # several GPUs: AReaL's own weight-update default stays
    assert "weight_update_mode" not in final["actor"]


def test_a_run_resumes_only_when_asked(tmp_path, monkeypatch):
    """The rendered config recovers automatically: a second run in the same folder without --resume
    is refused instead of silently continuing."""
    from aworld_train.engines.areal import render as areal_render
    from aworld_train.prerun import checks as preflight

    run = _render(trainer_for(tmp_path, {"backend": "areal"}))
    assert (
        run.final["recover"]["mode"] == "auto" and run.final["recover"]["freq_steps"] == "${saver.freq_steps}"
    )
    monkeypatch.setattr(preflight, "require_checks", lambda inputs, engine, run: None)
    monkeypatch.setattr(
        areal_render, "command", lambda config_path: (sys.executable, "-c", "print('launched')")
    )
    recover = Path(run.final["cluster"]["fileroot"]) / "checkpoints/root/aworld-train/run/recover_info"
    recover.mkdir(parents=True)
    with pytest.raises(ConfigError, match="holds AReaL recover data.*pass --resume"):
        trainer_for(tmp_path, {"backend": "areal"}).train()
    assert trainer_for(tmp_path, {"backend": "areal"}).train(resume=True)["returncode"] == 0
