"""AReaL's own trainer, end to end on a CPU: `aworld-train run` on
examples/calculator/grpo_areal_cpu.yaml with the tiny random model (tests/verl_cpu_support.py; the
example's embedded model learns in `make demo-areal`), in the AReaL environment,
launches AReaL's single-controller PPOTrainer through our entry point (FSDP actor on AReaL's CPU
platform and gloo, its rollout workers running our AWorldWorkflow against the real calculator MCP
server, our policy server in SGLang's place) for 2 GRPO steps, off-policy: `algorithm.max_staleness:
2` (AReaL's `rollout.max_head_offpolicyness`) lets AReaL sample up to two versions ahead of the
weights it trains; with LoRA (`algorithm.lora`, AReaL's `actor.use_lora`): the actor trains an
adapter, which our server loads after each update and samples from on its base. The run evaluates
its held-out tasks (k = 2 under two seeds) before any update and after the last, and ends with the
held-out line; `aworld-train eval` on the run folder, with the run's config, samples the same tokens
and gives the same figure as the run's own evaluation after training. One run, shared by every
assertion; minutes on 2 cores, hence `slow`; it runs last (tests/early_runs.py). What the run leaves
in its folder is read back by tests/areal_run_support.py.

The run's reward is the dense stand-in of the verl CPU test (tests/verl_cpu_support.py), which
differs between the samples of a group and raises for one task: its episodes fail inside the run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import early_runs
import pytest
from areal_run_support import (
    checkpoints,
    evaluated,
    groups,
    mismatch,
    sampled_tokens,
    sampled_versions,
    scalars,
)
from areal_support import AREAL_PYTHON, needs_areal
from verl_cpu_support import calculator_rows, cpu_run

from aworld_train.evaluation.run_summary import eval_sets, held_out_figures
from aworld_train.rollout.samples.codec import group_advantages

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500), needs_areal]

FAILING = {"id": "train-fails", "prompt": "What is 1 + 1?", "ground_truth": -1, "data_source": "calculator"}
# a cheaper run than the example's: 2 steps of 2 tasks x 2 samples, shorter episodes
SMALL = (
    "trainer.steps=2",
    "algorithm.group_size=2",
    "data.batch_size=2",
    "rollout.max_assistant_turns=2",
    "rollout.max_new_tokens=24",
    "rollout.temperature=1.0",
)
# the facade's staleness bound: AReaL's rollout.max_head_offpolicyness, with its decoupled loss
OFF_POLICY = ("algorithm.max_staleness=2",)
# the held-out evaluation: k samples of each test task under each seed, before and after training
HELD_OUT = ("trainer.eval_k=2", "trainer.eval_seeds=[3, 5]", "data.max_test=2")
K, SEEDS, TESTS = 2, (3, 5), 2
# an adapter of rank 8 on every linear layer, at a LoRA learning rate (an adapter starts at zero);
# every step's adapter saved (small), for the test to recompute what each version sampled, and no
# recover checkpoint (the base and optimizer state: seconds a step) within the 2 steps
LORA = (
    "algorithm.lora={rank: 8, alpha: 16}",  # the facade's key: AReaL's actor.use_lora, lora_rank, lora_alpha
    "algorithm.lr=1e-3",
    "trainer.save_every=1",
    "areal.recover.freq_steps=100",
)
STEPS = [0, 1]  # AReaL counts its steps from 0
IMPORTANCE_CAP = 2.0  # algorithm.importance_cap's default: AReaL's actor.rejection_sampling.upper
# the logprob mismatch of a float32 rollout and trainer on the same weights (a full-weight run's:
# the server's logprobs against a fresh forward, tests/areal_env/test_areal_cpu_server.py)
FLOAT32_MISMATCH = 1e-4


def start_run(tmp: Path) -> early_runs.Started | None:
    if not AREAL_PYTHON:
        return None
    # 4 tasks, 2 a step: the task whose reward fails is among them
    rows = [*calculator_rows(3), json.dumps(FAILING)]
    command, run_dir, model = cpu_run(
        AREAL_PYTHON,
        "examples/calculator/grpo_areal_cpu.yaml",
        tmp,
        rows,
        *SMALL,
        *OFF_POLICY,
        *LORA,
        *HELD_OUT,
    )

    def collect(returncode: int, log: str) -> dict:
        episodes = run_dir / "episodes.jsonl"
        events = run_dir / "areal" / "cpu_server_events.jsonl"
        return {
            "rc": returncode,
            "log": log,
            "run_dir": run_dir,
            "model": model,
            "stats": scalars(run_dir / "tensorboard"),
            "episodes": [json.loads(line) for line in episodes.read_text().splitlines()]
            if episodes.is_file()
            else [],
            "weight_loads": [json.loads(line) for line in events.read_text().splitlines()]
            if events.is_file()
            else [],
        }

    return early_runs.launch(command, tmp, 1400, collect, cwd=tmp)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return early_runs.result(__name__, start_run, tmp_path_factory.mktemp("areal_cpu"))


def test_areals_trainer_finishes_two_steps(run):
    assert run["rc"] == 0, run["log"][-4000:]
    assert "aworld_train.engines.areal.main" in run["log"]  # the entry point of a GPU run
    assert "CPU platform" in run["log"] and "CPU policy server" in run["log"]
    stats = run["stats"]
    assert sorted(stats["ppo_actor/update/grad_norm"]) == STEPS
    assert all(value > 0 for value in stats["ppo_actor/update/grad_norm"].values())


def test_only_the_adapter_trained_and_each_version_reached_the_server(run):
    """AReaL saves the adapter alone (no base weights), moved from the initial one; and the tokens
    each version sampled have the logprobs of the original base plus that version's adapter, to
    float32 precision, while the base alone is far off: every update's adapter reached the server."""
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    saved = checkpoints(run)
    assert sorted(saved) == [1, 2], saved
    (first,) = run["run_dir"].glob(
        "areal_files/checkpoints/*/*/*/actor/initial_lora/adapter_model.safetensors"
    )
    initial = load_file(str(first))
    assert initial and all(".lora_A." in name or ".lora_B." in name for name in initial)
    for folder in saved.values():
        assert not list(folder.glob("model*.safetensors")), list(folder.iterdir())
        trained = load_file(str(folder / "adapter_model.safetensors"))
        assert trained.keys() == initial.keys()
        assert max(float((trained[n] - initial[n]).abs().max()) for n in initial) > 0

    segments = sampled_tokens(run["run_dir"])
    base = AutoModelForCausalLM.from_pretrained(run["model"], dtype=torch.float32).eval()
    model = PeftModel.from_pretrained(base, str(saved[1]), adapter_name="1").eval()  # peft's own loading
    checked = []
    for version, folder in sorted(saved.items()):
        if version != 1:
            model.load_adapter(str(folder), adapter_name=str(version))
        model.set_adapter(str(version))
        adapted, tokens = mismatch(model, segments, version)
        if tokens:
            assert adapted < FLOAT32_MISMATCH, (version, adapted)
            with model.disable_adapter():  # the adapter matters: the base alone is far off
                assert mismatch(model, segments, version)[0] > 10 * FLOAT32_MISMATCH
            checked.append(version)
    assert checked, "no tokens sampled after an update"


def test_areals_actor_reports_the_mismatch_at_a_full_weight_runs_level(run):
    """Our actor measures, each step, the rollout's logprobs against its own forward for the tokens
    the current weights sampled (step 0's, at the level of float32 full weights); each step's line
    gives the figure, or says that the step trained older weights' tokens only; none warns."""
    stats = run["stats"]
    tokens = stats["ppo_actor/update/logprob_mismatch_tokens"]
    assert sorted(tokens) == STEPS and tokens[0] > 0
    assert stats["ppo_actor/update/logprob_mismatch/avg"][0] < FLOAT32_MISMATCH
    lines = [line for line in run["log"].splitlines() if "aworld-train: logprob mismatch" in line]
    assert len(lines) == len(STEPS) and not any("WARNING" in line for line in lines), lines
    for step, line in zip(STEPS, lines, strict=True):
        assert (
            (f"over {tokens[step]:.0f} tokens" in line) if tokens[step] else ("none of this update" in line)
        )


def test_the_policy_server_serves_each_update(run):
    """AReaL's actor saves its initial adapter, then its adapter after each step, and our server loads
    each (in place of the last), and samples with each version before the next load."""
    loads = run["weight_loads"]
    assert [(load["event"], load["version"]) for load in loads] == [("adapter", v) for v in (0, 1, 2)]
    assert [load["adapter"] for load in loads] == [f"default_lora-v{v}" for v in (0, 1, 2)]
    assert loads[0]["served_on_previous"]["requests"] == 0  # loaded before the first request
    assert all(load["tensors"] >= 10 and load["served_on_previous"]["requests"] > 0 for load in loads[1:])
    assert [load["served_on_previous"]["version"] for load in loads[1:]] == [0, 1]
    assert run["stats"]["ppo_actor/update/version_stats/v_theta"] == {step: float(step) for step in STEPS}


def test_off_policy_steps_train_tokens_of_older_weights_within_the_bound(run):
    """AReaL's own staleness stats, computed from the `versions` our rows carry: the first step trains
    tokens of its own weights, later ones tokens sampled while earlier steps trained, never more than
    max_staleness (2) versions old. The facade's bound brings the decoupled loss: where the tokens
    are the trained weights' own, the proximal policy (recomputed) gives the logprobs the server
    sampled with (behaviour importance weights of 1); where they are older, the weight of the
    proximal over the behaviour logprobs we recorded moves away from 1, clamped at importance_cap."""
    stats = run["stats"]
    staleness = stats["ppo_actor/update/version_stats/sample_staleness_theta_max"]
    oldest = stats["ppo_actor/update/version_stats/sample_staleness_theta_min"]
    assert staleness[0] == 0 and max(staleness.values()) >= 1 and max(staleness.values()) <= 2
    for step in STEPS:
        highest = stats["ppo_actor/update/behave_imp_weight/max"][step]
        lowest = stats["ppo_actor/update/behave_imp_weight/min"][step]
        assert highest <= IMPORTANCE_CAP
        if staleness[step] == 0:
            assert abs(highest - 1) < 1e-3 and abs(lowest - 1) < 1e-3
        if oldest[step] >= 1:  # every token stale
            assert max(highest - 1, 1 - lowest) > 1e-2


def test_our_rows_carry_the_versions_areals_engine_returned(run):
    """Per episode, the sampled tokens per version in the rows our workflow gave AReaL (through our
    ledger) equal those AReaL's engine returned; and no version is credited with tokens our server
    did not sample with it or an older one. AReaL stamps each token with the version it knows when
    the answer is read, which is never older than the one the request named (the server serves
    exactly that adapter or aborts) but may be newer: an answer read after `set_version` is stamped
    with the new version. So the bound holds cumulatively: up to each version, no more tokens are
    stamped than were served."""
    trained = [e for e in run["episodes"] if e["phase"] == "train" and e["advantage"] is not None]
    assert trained
    for episode in trained:
        assert episode["versions"] == episode["engine_versions"], episode
        assert episode["min_version"] == min(map(int, episode["versions"]))
        assert episode["max_version"] == max(map(int, episode["versions"]))
    assert len({v for e in run["episodes"] for v in e["engine_versions"]}) >= 2  # sampled by several
    stamped: dict[int, int] = {}
    for episode in run["episodes"]:
        for version, tokens in episode["engine_versions"].items():
            stamped[int(version)] = stamped.get(int(version), 0) + tokens
    served: dict[int, int] = {}  # per version, over every load (the initial adapter's follows none)
    for load in run["weight_loads"]:
        previous = load["served_on_previous"]
        served[previous["version"]] = served.get(previous["version"], 0) + previous["tokens"]
    # the last version loaded serves to the end (off-policy, AReaL samples on after its last
    # update): no later load counts its tokens
    last = run["weight_loads"][-1]["version"]
    assert set(stamped) <= set(served) | {last}, (stamped, served)
    for version in sorted(served):
        stamped_up_to = sum(tokens for v, tokens in stamped.items() if v <= version)
        served_up_to = sum(tokens for v, tokens in served.items() if v <= version)
        assert stamped_up_to <= served_up_to, (version, stamped, served)


def test_our_reward_and_statuses_are_in_areals_stats(run):
    stats = run["stats"]
    assert set(stats["rollout/reward"]) <= set(STEPS) and 0 in stats["rollout/reward"]
    for step in stats["rollout/reward"]:
        statuses = {tag: values[step] for tag, values in stats.items() if tag.startswith("rollout/status/")}
        assert sum(statuses.values()) == pytest.approx(1.0)
    failed_steps = [step for step, share in stats["rollout/status/reward_error"].items() if share > 0]
    # a step's rollout stats are the groups that finished since the last step: off-policy, that may
    # be the failing task's group alone (its share 1); in the others, ok episodes beside it
    assert failed_steps and any(share < 1 for share in stats["rollout/status/reward_error"].values())
    # the failed group gave AReaL nothing: it counts it as rejected, in that step only
    assert {step for step, n in stats.get("rollout/rejected", {}).items() if n > 0} == set(failed_steps)


def test_a_failed_episode_leaves_the_other_groups_advantages_as_without_it(run):
    """The task whose reward raises: both its episodes end as reward_error and give AReaL no row
    (AReaL draws another task in its place, which on 4 tasks may be that task again, from the next
    epoch); every other group trains with its own advantages."""
    train = groups([e for e in run["episodes"] if e["phase"] == "train"])
    assert all(len({e["task_id"] for e in group}) == 1 for group in train)
    failed = [group for group in train if group[0]["task_id"] == "train-fails"]
    assert failed
    for group in failed:
        assert [e["status"] for e in group] == ["reward_error", "reward_error"]
        assert all(e["advantage"] is None and e["reward"] is None for e in group)
    trained = [group for group in train if group[0]["task_id"] != "train-fails"]
    # 2 steps x 2 tasks; AReaL samples ahead of the steps (off-policy), so more groups finish
    assert len(trained) >= 4
    for group in trained:
        expected = group_advantages([e["reward"] for e in group], [0] * len(group))
        assert [e["advantage"] for e in group] == pytest.approx(expected)
        # ok, or cut at the 24 new tokens a call may have (reward 0): both train
        assert all(e["status"] in ("ok", "truncated") and e["loss_tokens"] > 0 for e in group)
    # AReaL trained on the rows it got: their rewards (our advantages) average 0 in every step
    assert all(abs(value) < 1e-5 for value in run["stats"]["ppo_actor/task_reward/avg"].values())


# -- the held-out evaluation ---------------------------------------------------------------------


def test_the_run_evaluates_the_weights_before_any_update_and_after_the_last(run):
    """AReaL's own `eval_before_train` would evaluate after the first update: the trainer evaluates the
    servers' weights of version 0 first, and those of the last version (2) after training, each
    test task k times under each held-out seed, into the sets the run's held-out line reads."""
    run_dir = run["run_dir"]
    assert eval_sets(run_dir) == ("eval/before", "eval/after")
    assert sampled_versions(run_dir / "tokens/eval/before") == {0}
    assert sampled_versions(run_dir / "tokens/eval/after") == {len(STEPS)}
    before = evaluated(run_dir / "tokens/eval/before")
    assert len(before) == TESTS and all(len(episodes) == K * len(SEEDS) for episodes in before.values())
    assert before != evaluated(run_dir / "tokens/eval/after")  # two updates of lr 1e-3 changed samples


def test_the_run_ends_with_the_held_out_line(run):
    figures = held_out_figures(run["run_dir"], K)
    line = next(line for line in run["log"].splitlines() if line.startswith("held-out (areal;"))
    assert line.startswith("held-out (areal; k=2, temperature 1, 2 turns, seeds 3 5): before accuracy")
    assert f"mean@2 {figures['before'].mean_at_k:.3f}) -> after accuracy" in line
    assert line.endswith(f"mean@2 {figures['after'].mean_at_k:.3f})")


def test_aworld_train_eval_on_the_run_folder_reproduces_its_evaluation_after_training(run, tmp_path):
    """`aworld-train eval RUN/config.yaml --checkpoints RUN`: the run folder resolves to the adapter
    AReaL saved after the last step, which loads on its base in float32 as the run's policy server
    served it; with the run's held-out settings (its defaults), each task's samples are the tokens
    the run's own evaluation after training sampled, and so its figures are the run's."""
    run_dir = run["run_dir"]
    out = tmp_path / "eval"
    command = [sys.executable, "-m", "aworld_train.facade.cli", "eval", str(run_dir / "config.yaml")]
    command += ["--checkpoints", str(run_dir), "--out-dir", str(out), "--output", str(out / "all.jsonl")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    (summary,) = json.loads((out / "eval_summary.json").read_text()).values()
    assert summary["model"] == str(checkpoints(run)[len(STEPS)])  # the last saved folder
    assert summary["k"] == K and summary["seeds"] == list(SEEDS)
    assert evaluated(out / "tokens") == evaluated(run_dir / "tokens/eval/after")
    after = held_out_figures(run_dir, K)["after"]
    assert summary["mean@k"]["mean"] == pytest.approx(after.mean_at_k)
    assert summary["pass@1"]["mean"] == pytest.approx(after.pass_at_1)
