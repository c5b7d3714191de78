from __future__ import annotations

import pytest
import yaml

from aworld_train.core.errors import ConfigError
from aworld_train.inputs.config import TrainConfig, load_config
from aworld_train.inputs.overrides import parse_override


def test_defaults_match_the_design():
    cfg = load_config(None)
    assert cfg.backend == "local" and cfg.model == "embedded:smollm2-135m"
    assert cfg.algorithm.group_size == 4 and cfg.algorithm.clip_high == 0.28
    assert cfg.rollout.tool_parser == "auto" and cfg.data.batch_size == 8


def test_yaml_and_cli_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"algorithm": {"lr": 3e-6}, "rollout": {"max_assistant_turns": 2}}))
    cfg = load_config(
        path,
        [
            "algorithm.group_size=8",
            "rollout.temperature=0.5",
            "verl.trainer.n_gpus_per_node=8",
            "data.train=x.jsonl",
        ],
    )
    assert cfg.algorithm.lr == 3e-6 and cfg.algorithm.group_size == 8
    assert cfg.rollout.max_assistant_turns == 2 and cfg.rollout.temperature == 0.5
    assert cfg.verl == {"trainer": {"n_gpus_per_node": 8}}
    assert cfg.data.train == "x.jsonl"


def test_render_round_trips():
    cfg = load_config({"rollout": {"max_assistant_turns": 7}, "areal": {"a": 1}})
    again = load_config(yaml.safe_load(cfg.render()))
    assert again == cfg


def test_unknown_key_says_did_you_mean():
    with pytest.raises(
        ConfigError, match=r"unknown config key 'algorithm.grup_size'.*did you mean 'group_size'"
    ):
        load_config({"algorithm": {"grup_size": 4}})
    with pytest.raises(ConfigError, match=r"unknown config key 'rolout'.*did you mean 'rollout'"):
        load_config({"rolout": {}})


def test_unknown_backend_names_the_choices():
    with pytest.raises(
        ConfigError, match=r"backend.*unknown backend 'verll'.*local, verl, areal.*did you mean 'verl'"
    ):
        load_config({"backend": "verll"})


def test_bad_value_names_the_field():
    with pytest.raises(ConfigError, match=r"config field 'algorithm.group_size'"):
        load_config({"algorithm": {"group_size": 0}})
    with pytest.raises(ConfigError, match="key.sub=value"):
        parse_override("no-equals-sign")


def test_config_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(bad)


def test_model_instance_is_accepted():
    cfg = TrainConfig(backend="local")
    assert load_config(cfg, ["trainer.steps=3"]).trainer.steps == 3


def test_the_old_name_of_max_assistant_turns_is_read_with_a_warning_naming_the_new_one():
    with pytest.warns(FutureWarning, match=r"rollout.max_turns is now rollout.max_assistant_turns"):
        cfg = load_config(None, ["rollout.max_turns=5"])
    assert cfg.rollout.max_assistant_turns == 5
    with pytest.raises(ConfigError, match="max_turns=5 and max_assistant_turns=3 are one setting"):
        load_config({"rollout": {"max_turns": 5, "max_assistant_turns": 3}})
