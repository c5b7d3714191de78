"""A policy per agent (`policies:`) on the local backend: a LoRA adapter per policy on one base,
each agent's calls sampled with its policy's adapter, each policy's GRPO step over its own agents'
samples only, checkpoints with a folder per policy; and the refusals, before any model loads."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
import torch

from aworld_train.core.errors import ConfigError
from aworld_train.inputs.config import load_config
from aworld_train.inputs.policy_plan import resolve_plan

PIPELINE = "aworld_train.agents.calculator_team:build_pipeline"
TWO_ADAPTERS = {
    "planner": {"agents": ["planner"], "lora": {"rank": 4, "alpha": 8}},
    "solver": {"agents": ["calculator_agent"], "lora": {"rank": 4, "alpha": 8}, "lr": 5.0e-4},
}
ROWS = [{"prompt": f"What is {i} + 1?", "ground_truth": i + 1} for i in (2, 7)]


def team_trainer(reward: str = "aworld_train.rewards.calculator:exact_answer", **config):
    from aworld_train import AgentTrainer

    return AgentTrainer(
        agent=PIPELINE,
        config={"env": [{"name": "calculator"}], **config},
        reward_func=reward,
        train_dataset=ROWS,
        test_dataset=ROWS,
    )


@pytest.mark.parametrize(
    ("policies", "extra", "message"),
    [
        (
            {"a": {"agents": ["planner"]}, "b": {"agents": ["planner"]}},
            {"algorithm": {"lora": {}}},
            "agent 'planner' is listed by both 'a' and 'b'",
        ),
        (
            {"a": {"agents": ["planner"], "lora": {}}, "b": {"agents": ["calculator_agent"]}},
            {},
            r"'a' is an adapter on the shared base but 'b' is a full model",
        ),
        (
            {"a": {"agents": ["planner"]}, "b": {"agents": ["calculator_agent"]}},
            {"rollout": {"engine": "vllm"}},
            "rollout.engine: vllm with a full model per policy",
        ),
        (
            {"a": {"agents": ["planner"], "lora": {}, "frozen": True}},
            {},
            "every policy is frozen, so nothing trains",
        ),
        (TWO_ADAPTERS, {"algorithm": {"max_staleness": 1}}, "algorithm.max_staleness=1 with policies"),
        (TWO_ADAPTERS, {"rollout": {"workers": 2}}, "rollout.workers=2 with policies"),
        ({"a.b": {"agents": ["planner"], "lora": {}}}, {}, "'a.b' cannot name a policy"),
    ],
)
def test_policies_that_cannot_run_are_refused_naming_the_field(policies, extra, message):
    with pytest.raises(ConfigError, match=message):
        load_config({"policies": policies, **extra})


@pytest.mark.parametrize(
    ("policies", "message"),
    [
        (
            {**TWO_ADAPTERS, "solver": {"agents": ["calculater_agent"], "lora": {}}},
            r"policies.solver.agents names 'calculater_agent'.*did you mean 'calculator_agent'",
        ),
        ({"planner": TWO_ADAPTERS["planner"]}, r"no policy serves agent\(s\) 'calculator_agent'"),
    ],
)
def test_policies_must_fit_the_teams_agents(policies, message):
    with pytest.raises(ConfigError, match=message):
        team_trainer(policies=policies)


def test_a_lone_agent_and_the_engines_without_it_refuse_policies():
    from aworld_train import AgentTrainer

    with pytest.raises(ConfigError, match="a policy per agent needs a team"):
        AgentTrainer(
            agent="aworld_train.agents.calculator:build_agent",
            config={
                "env": [{"name": "calculator"}],
                "policies": {"a": {"agents": ["calculator"], "lora": {}}},
            },
            reward_func="aworld_train.rewards.calculator:exact_answer",
            train_dataset=ROWS,
        )
    for backend in ("verl", "areal"):
        with pytest.raises(ConfigError, match=f"policies: backend {backend} trains one policy"):
            team_trainer(backend=backend, policies=TWO_ADAPTERS)


# -- the model: one base, an adapter per policy --------------------------------------------------


@pytest.fixture
def team_model(tiny_model_dir):
    """The tiny model with the two policies' adapters, each set to weights of its own (a fresh
    adapter is the base exactly), and the config they came from."""
    from aworld_train.engines.local import team
    from aworld_train.rollout.policies.models import load_model

    cfg = load_config({"model": str(tiny_model_dir), "policies": TWO_ADAPTERS})
    torch.manual_seed(1)
    model = team.attach_adapters(load_model(str(tiny_model_dir), dtype="float32"), plan_of(cfg))
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "lora_B" in name:
                weight.normal_(0, 0.5)
    return model.eval(), cfg


def plan_of(cfg):
    return resolve_plan(cfg.policies, cfg.algorithm)


def logprobs_under(model, adapter: str, ids: list[int], start: int) -> torch.Tensor:
    """log p(ids[i] | ids[:i]) for i >= start with `adapter` active, at temperature 1."""
    model.set_adapter(adapter)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, start - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[start:])[:, None]).squeeze(-1)


def test_each_agents_calls_are_sampled_with_its_policys_adapter(team_model, tokenizer, calculator_server):
    """A team's episodes through the router: every segment's recorded logprobs are its own agent's
    adapter's (recomputed), and not the other adapter's."""
    from aworld_train.agents.calculator_team import build_pipeline
    from aworld_train.aworld.specs import load_agent_spec
    from aworld_train.engines.local import team
    from aworld_train.rollout.episodes.runner import local_runner
    from aworld_train.rollout.episodes.trajectory import Task
    from aworld_train.rollout.policies.router import PolicyRouter

    model, cfg = team_model
    cfg.rollout.max_new_tokens, cfg.rollout.max_assistant_turns = 12, 3
    cfg.rollout.tool_block, cfg.rollout.train_on_malformed = "never", True
    spec = load_agent_spec(build_pipeline(url=calculator_server.url))
    runner, policy = local_runner(spec, cfg.model, cfg.rollout, model=model, tokenizer=tokenizer)
    tasks = [Task(str(i), [row["prompt"]], row["ground_truth"]) for i, row in enumerate(ROWS)]
    plan = plan_of(cfg)
    router = PolicyRouter.of(team.policy_samplers(plan, policy, None, cfg.model), plan.owner)
    trajectories = asyncio.run(runner.run_batch(router, tasks, samples_per_task=2, seed=3))
    owner = {"planner": "planner", "calculator_agent": "solver"}
    checked = set()
    for trajectory in trajectories:
        for segment in trajectory.segments:
            sampled = [i for i, m in enumerate(segment.response_mask) if m]
            if not sampled:
                continue
            ids, start = segment.prompt_ids + segment.response_ids, len(segment.prompt_ids)
            recorded = torch.tensor([segment.response_logprobs[i] for i in sampled])
            other = "solver" if owner[segment.agent] == "planner" else "planner"
            own = logprobs_under(model, owner[segment.agent], ids, start)[sampled]
            theirs = logprobs_under(model, other, ids, start)[sampled]
            assert torch.allclose(own, recorded, atol=1e-4), segment.agent
            assert (theirs - recorded).abs().max() > 1e-2, segment.agent
            checked.add(segment.agent)
    assert checked == {"planner", "calculator_agent"}


def sample_of(agent: str, ids: list[int], start: int, advantage: float, logprobs):
    from aworld_train.engines.local.samples import Sample

    n = len(ids) - start
    return Sample(ids, start, [1] * n, logprobs.tolist(), advantage, agent=agent, versions=[0] * n)


def sampler_of(model, tokenizer):
    from aworld_train.rollout.policies.local import LocalPolicy

    return LocalPolicy(model, tokenizer, [tokenizer.eos_token_id])


def test_a_policys_step_changes_only_its_own_agents_logprobs(team_model, tokenizer):
    """The planner's samples train the planner's adapter alone: the solver's logprobs on the same
    tokens are identical after the step, the planner's moved; a frozen policy has no learner."""
    from aworld_train.engines.local.team import TeamLearner

    model, cfg = team_model
    sampler = sampler_of(model, tokenizer)
    ids, start = list(range(100, 140)), 20
    before = {name: logprobs_under(model, name, ids, start) for name in ("planner", "solver")}
    learner = TeamLearner.of_adapters(model, plan_of(cfg), cfg.algorithm, 1.0, 0, sampler)
    samples = [
        sample_of("planner", ids, start, 1.0, before["planner"]),
        sample_of("planner", ids[:-5], start, -1.0, before["planner"][:-5]),
    ]
    metrics = learner.step(samples, version=0)
    assert metrics["policy/planner/samples"] == 2 and metrics["policy/solver/skipped"] == 1
    assert metrics["samples"] == 2 and metrics["grad_norm"] > 0 and sampler.version == 1  # one update
    assert metrics["logprob_mismatch_max"] < 1e-4  # sampled and recomputed with the same adapter
    after = {name: logprobs_under(model, name, ids, start) for name in ("planner", "solver")}
    assert torch.equal(after["solver"], before["solver"])
    assert (after["planner"] - before["planner"]).abs().max() > 1e-4
    frozen = cfg.model_copy(deep=True)
    frozen.policies["solver"].frozen = True
    assert list(
        TeamLearner.of_adapters(model, plan_of(frozen), frozen.algorithm, 1.0, 0, sampler).learners
    ) == ["planner"]


def test_every_adapter_and_learner_is_saved_and_loaded_exactly(
    team_model, tiny_model_dir, tokenizer, tmp_path
):
    from aworld_train.engines.local import team
    from aworld_train.rollout.policies.models import load_model

    model, cfg = team_model
    plan = plan_of(cfg)
    learner = team.TeamLearner.of_adapters(model, plan, cfg.algorithm, 1.0, 0, sampler_of(model, tokenizer))
    ids = list(range(100, 130))
    learner.step([sample_of("calculator_agent", ids, 10, 1.0, logprobs_under(model, "solver", ids, 10))], 0)
    learner.save(tmp_path)
    assert {p.name for p in (tmp_path / "policies").iterdir() if p.is_dir()} == {"planner", "solver"}
    loaded = team.load_adapters(load_model(str(tiny_model_dir), dtype="float32"), tmp_path, plan)
    saved = dict(model.named_parameters())
    for name, weight in loaded.named_parameters():
        if "lora_" in name:
            assert torch.equal(weight, saved[name]), name
    restored = team.TeamLearner.of_adapters(
        loaded, plan, cfg.algorithm, 1.0, 0, sampler_of(loaded, tokenizer)
    )
    restored.load_state_dict(learner.state_dict())
    assert restored.samplers["solver"].version == 1
    state = restored.learners["solver"].optimizer.state_dict()["state"]
    assert state and all(torch.equal(s["exp_avg"], o["exp_avg"]) for s, o in zip(
        state.values(), learner.learners["solver"].optimizer.state_dict()["state"].values(), strict=True
    ))  # fmt: skip


def each_step_trains_each_policy(run_dir) -> None:
    """Each step's metrics per policy (samples, learning rate, mismatch), and its line naming them."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if "policy/planner/samples" in row]
    assert len(steps) == 2
    for row in steps:
        # every trained sample is one policy's: the step's count is the policies' sum
        assert row["samples"] == row["policy/planner/samples"] + row["policy/solver/samples"]
        assert row["policy/solver/lr"] == 5.0e-4 and row["policy/planner/lr"] == 1.0e-5
        assert row["policy/planner/logprob_mismatch_tokens"] > 0
    # the step line names each policy's samples
    from aworld_train.engines.local.display import step_line

    assert re.search(
        r"policies: planner \d+ samples \(\d+ with signal\), mismatch [\d.]+; solver \d+",
        step_line(1, 2, steps[0]),
    )


def lanes_of_a_team_episode(run_dir) -> set[tuple]:
    """The viewer's lanes of a step-1 episode in which both agents ran: (agent, policy, its index)."""
    from aworld_train.viewer.store import Run
    from aworld_train.viewer.tokenizer import RunTokenizer
    from aworld_train.viewer.views import episode_view

    run = Run(run_dir)
    episode = next(row for row in run.index(run.episode_set("step_000001")) if len(row["agents"]) == 2)
    view = episode_view(run, RunTokenizer(run), "step_000001", episode["episode_id"])
    return {(lane["agent"], lane["policy"], lane["policy_index"]) for lane in view["lanes"]}


def test_a_team_run_trains_an_adapter_per_policy_and_saves_each(tiny_model_dir, tmp_path):
    """The local engine end to end: two steps of the team with an adapter per policy; each step's
    metrics per policy, a checkpoint folder per policy, and a resume that needs those policies."""
    run_dir = tmp_path / "run"
    config = {
        "model": str(tiny_model_dir),
        "policies": TWO_ADAPTERS,
        "algorithm": {"group_size": 2, "kl_coef": 0.01},
        "rollout": {"max_new_tokens": 12, "max_assistant_turns": 3, "tool_block": "never", "train_on_malformed": True},
        "data": {"batch_size": 2},
        "trainer": {"steps": 2, "save_every": 1, "eval_every": 0, "eval_before": False, "eval_after": False,
                    "run_dir": str(run_dir), "save_total_limit": 2},
    }  # fmt: skip
    summary = team_trainer(**config).train()
    assert summary["final_checkpoint"]
    each_step_trains_each_policy(run_dir)
    final = run_dir / "checkpoints" / "step_000002"
    for name in ("planner", "solver"):
        assert (final / "policies" / name / "adapter_model.safetensors").is_file()
    # the viewer's episode: a lane per agent, each naming (and coloured by) its policy
    assert lanes_of_a_team_episode(run_dir) == {("planner", "planner", 0), ("calculator_agent", "solver", 1)}
    # eval of the team run: the base with each policy's saved adapter, each agent's calls to its own
    suite = team_trainer(**config, eval={"checkpoints": [str(run_dir)], "seeds": [0]}).evaluate_suite(
        out_dir=tmp_path / "eval"
    )
    (checkpoint,) = suite.results
    assert checkpoint.model == str(run_dir / "checkpoints" / "step_000002")
    agents = {seg.agent for t in checkpoint.reports[0].trajectories for seg in t.segments}
    assert agents == {"planner", "calculator_agent"}
    # export: a merged model per policy
    from aworld_train.engines.local.lora import export

    out = export(run_dir, tmp_path / "merged")
    assert sorted(p.parent.name for p in out.glob("*/model.safetensors")) == ["planner", "solver"]
    # a resume with other policies is refused before anything loads
    other = {**config, "policies": {"all": {"agents": ["planner", "calculator_agent"], "lora": {"rank": 4}}}}
    with pytest.raises(ConfigError, match="holds no adapter of policy 'all'"):
        team_trainer(**other).train(resume=True)


def test_the_policies_example_is_accepted_as_written(monkeypatch):
    """examples/calculator_team/grpo_local_policies.yaml (make team-demo-policies) passes every check."""
    from pathlib import Path

    from aworld_train import AgentTrainer

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    trainer = AgentTrainer(config="examples/calculator_team/grpo_local_policies.yaml")
    assert {name: p.agents for name, p in trainer.config.policies.items()} == {
        "planner": ["planner"],
        "solver": ["calculator_agent"],
    }


def test_a_full_model_per_policy_trains_saves_resumes_and_evaluates(tiny_model_dir, tmp_path, monkeypatch):
    """No adapter named: each policy is a copy of the model with its own sampler and optimizer. One
    step, then a resume to the second; each policy's folder is a model, each trained policy's
    weights moved and only its own; the run's eval loads each agent's model."""
    from aworld_train.rollout.policies.models import load_model

    monkeypatch.setenv("AWORLD_TRAIN_DTYPE", "float32")  # saved as loaded: an unchanged weight compares equal
    run_dir = tmp_path / "run"
    policies = {
        "planner": {"agents": ["planner"]},
        "solver": {"agents": ["calculator_agent"], "frozen": True},
    }
    config = {
        "model": str(tiny_model_dir),
        "policies": policies,
        "algorithm": {"group_size": 2, "lr": 1e-3},
        "rollout": {"max_new_tokens": 12, "max_assistant_turns": 3, "tool_block": "never", "train_on_malformed": True},
        "data": {"batch_size": 2},
        "trainer": {"steps": 1, "save_every": 1, "eval_every": 0, "eval_before": False, "eval_after": False,
                    "run_dir": str(run_dir)},
    }  # fmt: skip
    # a reward that differs within every group, so that every step moves the trained weights
    team_trainer("reward_fixtures:text_length", **config).train()
    config["trainer"]["steps"] = 2
    summary = team_trainer("reward_fixtures:text_length", **config).train(resume=True)
    final = run_dir / "checkpoints" / "step_000002" / "policies"
    assert summary["final_checkpoint"] and {p.parent.name for p in final.glob("*/config.json")} == {
        "planner",
        "solver",
    }
    state = torch.load(final.parent / "trainer_state.pt", weights_only=False)
    assert state["learner"]["versions"] == {"planner": 2, "solver": 0}  # the frozen model never changed
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if "policy/planner/samples" in row] == [1, 2]
    initial = load_model(str(tiny_model_dir), dtype="float32").state_dict()
    for name, moved in (("planner", True), ("solver", False)):
        weights = load_model(str(final / name), dtype="float32").state_dict()
        changed = max(float((weights[k] - initial[k]).abs().max()) for k in initial)
        assert (changed > 0) == moved, name
    suite = team_trainer(**config, eval={"checkpoints": [str(run_dir)], "seeds": [0]}).evaluate_suite(
        out_dir=tmp_path / "eval"
    )
    agents = {seg.agent for t in suite.results[0].reports[0].trajectories for seg in t.segments}
    assert agents == {"planner", "calculator_agent"}
