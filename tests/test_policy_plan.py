"""The policy plan: the config's policy settings resolved once into which weights answer which agent
(a run of one policy the one-entry plan), read back from a run folder's config, and the checkpoint
layout its policies are saved in."""

from __future__ import annotations

import pytest
import yaml

from aworld_train.core.errors import ConfigError
from aworld_train.inputs.config import load_config
from aworld_train.inputs.policy_plan import SHARED, resolve_plan, saved_plan
from aworld_train.rollout.policies import checkpoint_layout as layout

TEAM = {"planner": {"agents": ["planner"]}, "solver": {"agents": ["calculator_agent", "checker"]}}


def plan_of(settings: dict):
    cfg = load_config(settings)
    return resolve_plan(cfg.policies, cfg.algorithm)


def test_a_run_without_policies_is_one_full_policy_serving_every_agent():
    plan = plan_of({"algorithm": {"lr": 3.0e-5}})
    assert not plan.per_agent and plan.names == [SHARED] and plan.kind == "full"
    assert plan.first.lr == 3.0e-5 and plan.first.agents == () and not plan.lone_adapter
    assert plan.policy_of("anyone") is plan.first and plan.owner == {}
    assert plan.lora_rank is None and plan.frozen_agents(["x"]) == ["x"]


def test_a_run_without_policies_trains_one_adapter_with_algorithm_lora():
    plan = plan_of({"algorithm": {"lora": {"rank": 8}}})
    assert plan.kind == "adapter" and plan.lone_adapter and plan.lora_rank == 8
    assert plan.first.lora.rank == 8 and plan.names == [SHARED]


def test_adapters_per_policy_take_their_own_lora_and_rate_else_the_algorithms():
    policies = {
        "planner": {"agents": ["planner"], "lora": {"rank": 4}, "lr": 5.0e-5},
        "solver": {"agents": ["calculator_agent"]},
    }
    plan = plan_of({"algorithm": {"lora": {"rank": 16}, "lr": 2.0e-4}, "policies": policies})
    planner, solver = plan.policies
    assert plan.per_agent and plan.kind == "adapter" and not plan.lone_adapter
    assert (planner.lora.rank, planner.lr) == (4, 5.0e-5)
    assert (solver.lora.rank, solver.lr) == (16, 2.0e-4)  # algorithm.lora and algorithm.lr
    assert plan.owner == {"planner": "planner", "calculator_agent": "solver"}
    assert plan.policy_of("calculator_agent") is solver and plan.lora_rank == 16


def test_policies_without_any_lora_are_a_full_model_each():
    plan = plan_of({"policies": TEAM})
    assert plan.per_agent and plan.kind == "full" and [p.kind for p in plan.policies] == ["full", "full"]
    assert plan.names == ["planner", "solver"] and plan.lora_rank is None
    assert plan.policy_of("checker").name == "solver"


def test_a_frozen_policy_is_served_but_not_trained_and_its_agents_carry_no_loss():
    team = {**TEAM, "planner": {"agents": ["planner"], "frozen": True}}
    plan = plan_of({"policies": team, "rollout": {"frozen_agents": ["checker"]}})
    assert [p.name for p in plan.trained] == ["solver"] and plan.policy_of("planner").frozen
    assert plan.frozen_agents(["checker"]) == ["checker", "planner"]


def test_the_plan_checks_its_settings_naming_the_field():
    with pytest.raises(
        ConfigError, match="'planner' is an adapter on the shared base but 'solver' is a full"
    ):
        plan_of({"policies": {**TEAM, "planner": {"agents": ["planner"], "lora": {"rank": 4}}}})
    with pytest.raises(ConfigError, match="every policy is frozen"):
        plan_of({"policies": {name: {**p, "frozen": True} for name, p in TEAM.items()}})
    with pytest.raises(ConfigError, match="agent 'planner' is listed by both 'planner' and 'solver'"):
        plan_of({"policies": {**TEAM, "solver": {"agents": ["planner"]}}})


def test_a_saved_run_config_gives_back_the_plan_it_ran_with():
    settings = {
        "algorithm": {"lora": {"rank": 8}, "lr": 1.0e-4},
        "policies": {**TEAM, "solver": {**TEAM["solver"], "lr": 3e-4}},
    }
    cfg = load_config(settings)
    assert saved_plan(yaml.safe_load(cfg.render())) == resolve_plan(cfg.policies, cfg.algorithm)
    assert saved_plan({}) == resolve_plan({}, load_config({}).algorithm)  # a run of one policy


def test_the_layout_finds_each_policys_folder_and_refuses_a_missing_one(tmp_path):
    for name in ("planner", "solver"):
        (tmp_path / "policies" / name).mkdir(parents=True)
        (tmp_path / "policies" / name / "adapter_config.json").write_text("{}")
    assert layout.saved_policies(tmp_path) == {n: tmp_path / "policies" / n for n in ("planner", "solver")}
    assert (
        layout.holds_policies(tmp_path) and layout.holds_policy(tmp_path) and not layout.holds_model(tmp_path)
    )
    assert layout.policy_folders(tmp_path, ["solver"], "adapter") == {
        "solver": tmp_path / "policies" / "solver"
    }
    with pytest.raises(
        ConfigError, match=r"holds no model of policy 'solver' \(policies/solver/config.json\)"
    ):
        layout.policy_folder(tmp_path, "solver", "full")
    with pytest.raises(ConfigError, match=r"holds no LoRA adapter \(adapter/adapter_config.json\)"):
        layout.adapter_folder(tmp_path)


def test_an_engine_of_one_policy_refuses_a_plan_of_a_policy_per_agent():
    from aworld_train.engines import get_engine
    from aworld_train.engines.protocol import refuse_what_it_cannot

    cfg = load_config({"policies": TEAM})
    plan = resolve_plan(cfg.policies, cfg.algorithm)
    with pytest.raises(ConfigError, match="policies: backend verl trains one policy"):
        refuse_what_it_cannot(get_engine("verl"), cfg, plan)
    refuse_what_it_cannot(get_engine("local"), cfg, plan)
    refuse_what_it_cannot(get_engine("verl"), cfg, resolve_plan({}, cfg.algorithm))
