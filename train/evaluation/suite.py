"""`aworld-train eval` over several checkpoints and seeds: each evaluated, then one table (markdown,
CSV) and one plot (suite_table.py).

Each checkpoint (a run folder, a checkpoint folder or `embedded:<name>`) is evaluated
once per seed with k samples per task; pass@1, pass@k and mean@k are reported as
their mean and spread (sample standard deviation, min, max) across seeds. Every episode's
tokens go to `<out_dir>/tokens/<checkpoint>/seed_<seed>/` (`aworld-train view` compares them). The policy
is the local model, or an OpenAI-compatible completions endpoint (`eval.policy_url`).
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aworld_train.aworld.specs import Spec
from aworld_train.evaluation.areal_checkpoints import areal_model
from aworld_train.evaluation.checkpoints import (
    checkpoint_labels,
    loadable,
    resolve_checkpoint,
    team_runner,
)
from aworld_train.evaluation.held_out import HeldOut, command_held_out
from aworld_train.evaluation.report import EvalReport, evaluate
from aworld_train.evaluation.suite_table import METRICS, CheckpointResult, SuiteResult
from aworld_train.evaluation.verl_checkpoints import verl_cpu_model
from aworld_train.inputs.config import TrainConfig
from aworld_train.inputs.reward import RewardFunction
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.samples.token_log import TOKENS_DIR, write_episodes


def _runner(config: TrainConfig, model_ref: str, spec, reward):
    """(runner, router, closer) for one checkpoint: the local model (a checkpoint with a policy per
    agent: its plan's policies), or the completions endpoint."""
    from aworld_train.core.protocol import resolve_env_refs
    from aworld_train.rollout.episodes.runner import EpisodeRunner, local_runner
    from aworld_train.rollout.episodes.template_check import require_usable_template, template_report
    from aworld_train.rollout.policies.completions import CompletionsPolicy
    from aworld_train.rollout.policies.models import load_tokenizer
    from aworld_train.rollout.policies.router import PolicyRouter
    from aworld_train.rollout.tokens.turns.stops import stop_token_ids

    ev = config.eval
    rollout = command_held_out(config).rollout(config.rollout)
    if ev.policy_url is None:
        team = team_runner(model_ref, spec, rollout, reward)
        if team is not None:
            return *team, None
        model = verl_cpu_model(model_ref)  # float32, as verl's CPU rollout sampled (else None)
        # an AReaL checkpoint as its run sampled from it: its dtype, a LoRA adapter on its base
        tokenizer_ref, areal = areal_model(model_ref) or (model_ref, None)
        runner, policy = local_runner(spec, tokenizer_ref, rollout, reward, model=model or areal)
        return runner, PolicyRouter(policy), None
    # remote: the prompt is rendered here with the tokenizer of `model` (or the checkpoint, if local)
    tokenizer_ref = model_ref if loadable(model_ref) else config.model
    tokenizer = load_tokenizer(tokenizer_ref)
    require_usable_template(template_report(tokenizer, rollout), tokenizer_ref)
    stops = stop_token_ids(tokenizer)
    policy = CompletionsPolicy(
        resolve_env_refs(ev.policy_url),
        ev.policy_model or model_ref,
        stop_token_ids=stops,
        api_key=resolve_env_refs(ev.api_key) if ev.api_key else None,
        timeout_s=ev.request_timeout_s,
    )
    return EpisodeRunner(spec, tokenizer, rollout, reward), PolicyRouter(policy), policy


def check_policy_url(config: TrainConfig, models: list[str]) -> None:
    """`eval.policy_url` answers one completion in token ids for each model it is to serve,
    before any server starts or tokenizer loads: an endpoint that does not answer, or answers
    in token text, would otherwise fail every episode of the evaluation."""
    from aworld_train.core.protocol import resolve_env_refs
    from aworld_train.rollout.policies.client import SamplingParams
    from aworld_train.rollout.policies.completions import CompletionsPolicy, PolicyServerError

    ev = config.eval
    url = resolve_env_refs(ev.policy_url)

    async def probe(model: str) -> None:
        policy = CompletionsPolicy(
            url,
            model,
            api_key=resolve_env_refs(ev.api_key) if ev.api_key else None,
            timeout_s=min(ev.request_timeout_s, 30.0),
            retries=0,
        )
        try:  # one token of a one-token prompt: any id the vocabulary has
            await policy.generate([0], SamplingParams(max_new_tokens=1, temperature=0.0))
        finally:
            await policy.aclose()

    for model in dict.fromkeys(models):
        try:
            asyncio.run(probe(model))
        except PolicyServerError as exc:
            raise PolicyServerError(
                f"eval.policy_url (--policy-url), asked for model {model!r}: {exc}; start that server, "
                "or fix the URL"
            ) from None


def _write_report(
    report: EvalReport, out_dir: Path, name: str, extra: dict[str, Any], trajectories_path: str | Path | None
) -> None:
    """One checkpoint and seed's trajectories (JSONL and token files), and their lines in the file of all."""
    report.write_jsonl(out_dir / f"{name}.jsonl", extra)
    write_episodes(out_dir / TOKENS_DIR, name, report.trajectories, "eval")
    if trajectories_path is not None:
        report.write_jsonl(trajectories_path, extra, append=True)


def _checkpoints(config: TrainConfig) -> tuple[list[str], list[str]]:
    """The checkpoints to evaluate: their labels in the table, and what each loads."""
    ev = config.eval
    refs = list(ev.checkpoints) or [config.model]
    # remote endpoints serve names the local loaders may not know: those are sent as given
    resolved = [ref if ev.policy_url and not loadable(ref) else resolve_checkpoint(ref) for ref in refs]
    if ev.policy_url:
        check_policy_url(config, [ev.policy_model or ref for ref in resolved])
    return checkpoint_labels(refs, resolved), resolved


def run_suite(
    config: TrainConfig,
    spec: Spec,
    tasks: list[Task],
    reward: RewardFunction,
    *,
    out_dir: str | Path,
    trajectories_path: str | Path | None = None,
    on_report: Callable[[str, int, EvalReport], None] | None = None,
    show_progress: bool = True,
) -> SuiteResult:
    """Evaluate every checkpoint of `config.eval` (or `config.model`) under every seed; write
    the table, the plot and the trajectories (per checkpoint and seed, and all in one file)."""
    from aworld_train.prerun.servers import running_envs

    held = command_held_out(config)
    out_dir = Path(out_dir)
    labels, resolved = _checkpoints(config)
    results = []
    if trajectories_path is not None:
        Path(trajectories_path).parent.mkdir(parents=True, exist_ok=True)
        Path(trajectories_path).write_text("")
    with running_envs(config.env, out_dir):
        for label, model_ref in zip(labels, resolved, strict=True):
            runner, router, closer = _runner(config, model_ref, spec, reward)
            try:
                reports = _checkpoint_reports(runner, router, closer, tasks, label, held, show_progress)
                result = CheckpointResult(label, model_ref, held.k)
                for seed, report in reports:
                    result.reports[seed] = report
                    extra = {"checkpoint": label, "model": model_ref, "seed": seed, "k": held.k}
                    _write_report(report, out_dir, f"{label}/seed_{seed}", extra, trajectories_path)
                    if on_report is not None:
                        on_report(label, seed, report)
            finally:
                runner.close()
                del runner, router
                gc.collect()  # one checkpoint's weights at a time
            results.append(result)
    suite = SuiteResult(held.k, list(held.seeds), results, out_dir)
    suite.write()
    summary = {
        r.label: {
            "model": r.model,
            **{m: r.stats(m) for m in METRICS},
            "k": held.k,
            "seeds": list(held.seeds),
        }
        for r in results
    }
    (out_dir / "eval_summary.json").write_text(json.dumps(summary, indent=2))
    refuse_failed_evaluations(suite, trajectories_path or out_dir)
    return suite


def refuse_failed_evaluations(suite: SuiteResult, written: str | Path) -> None:
    """An evaluation whose every episode failed for one cause scored nothing: an error, after
    the table and the trajectories (which hold each episode's error) are written."""
    from aworld_train.core.errors import EvaluationFailed
    from aworld_train.rollout.samples.failure_streak import FIXES, one_failure_cause

    failed = []
    for result in suite.results:
        for seed, report in result.reports.items():
            failure = one_failure_cause(report.trajectories)
            if failure is not None:
                failed.append((result.label, seed, *failure))
    if not failed:
        return
    label, seed, cause, example = failed[0]
    others = f" (and {len(failed) - 1} more evaluations)" if len(failed) > 1 else ""
    raise EvaluationFailed(
        f"every episode of {label} (seed {seed}){others} ended as {cause!r}"
        + (f" ({example})" if example else "")
        + f", so its scores measure nothing: {FIXES.get(cause, 'see the message')}. "
        f"Table and trajectories: {suite.out_dir}, {written}"
    )


def _checkpoint_reports(runner, router, closer, tasks, label: str, held: HeldOut, show_progress: bool):
    """(seed, report) of one checkpoint under each seed, in order, each as soon as it is done."""
    for seed in held.seeds:
        description = f"{label} seed {seed}"
        yield (
            seed,
            asyncio.run(
                _evaluate(
                    runner,
                    router,
                    tasks,
                    description,
                    show_progress=show_progress,
                    k=held.k,
                    seed=seed,
                    closer=closer,
                )
            ),
        )


async def _evaluate(runner, router, tasks, description, *, show_progress, k, seed, closer) -> EvalReport:
    try:
        return await evaluate(
            runner, router, tasks, description, show_progress, samples_per_task=k, seed=seed
        )
    finally:
        if closer is not None:
            await closer.aclose()  # its connections belong to this event loop
