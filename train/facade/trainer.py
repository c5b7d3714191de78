"""AgentTrainer: the facade. Every input is checked here, before any model is loaded."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aworld_train.aworld.agent_spec import build_agent
from aworld_train.aworld.specs import Spec, load_agent_spec
from aworld_train.aworld.swarm_spec import SwarmSpec, build_swarm
from aworld_train.core.errors import AgentSpecError, ConfigError, DatasetError
from aworld_train.core.protocol import MissingVariable, resolve_env_refs, url_variable
from aworld_train.core.validation import did_you_mean, http_url_problem
from aworld_train.engines import Engine, RenderedRun, RunInputs, get_engine
from aworld_train.engines.protocol import refuse_what_it_cannot
from aworld_train.inputs.config import RolloutSettings, TrainConfig, load_config
from aworld_train.inputs.dataset import load_tasks
from aworld_train.inputs.dotenv_files import load_env_files
from aworld_train.inputs.policy_plan import PolicyPlan, resolve_plan, team_problem
from aworld_train.inputs.reward import RewardFunction
from aworld_train.prerun.checks import run_folder_writable
from aworld_train.prerun.mcp import check_mcp_servers
from aworld_train.prerun.servers import check_server_environments
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.gateway.addresses import is_local_address
from aworld_train.rollout.gateway.process_agent import ProcessAgent, check_starts
from aworld_train.rollout.policies.models import check_model, dtype_setting

log = logging.getLogger("aworld_train")


class AgentTrainer:
    """Train (or evaluate) an AWorld agent on a dataset with a reward function.

    agent: an AWorld Agent, 'module:factory', or an agent YAML path (or config `agent:`).
    config: a YAML path, a dict, a TrainConfig or None (defaults).
    reward_func: a function, 'module:function', 'file.py:function' or (file, name) (or config `reward.fn`).
    train_dataset / test_dataset: jsonl/json/parquet paths, lists of dicts or datasets.Dataset
    (or config `data.train` / `data.test`).
    run_path: the run folder (or config `trainer.run_dir`).
    """

    def __init__(
        self,
        agent: Any = None,
        config: str | Path | dict | TrainConfig | None = None,
        reward_func: Callable | str | tuple | None = None,
        train_dataset: Any = None,
        test_dataset: Any = None,
        run_path: str | Path | None = None,
        overrides: list[str] | None = None,
    ) -> None:
        # `.env` settings first: the agent's `${VAR}` references are resolved by the checks below
        load_env_files(config if isinstance(config, str | Path) else None)
        _check_settings()
        self.config = load_config(config, overrides)
        cfg = self.config
        self.engine: Engine = get_engine(cfg.backend)
        self.engine.validate(cfg)
        # which weights answer which agent, resolved once: every later part of the run reads it
        self.plan: PolicyPlan = resolve_plan(cfg.policies, cfg.algorithm)
        refuse_what_it_cannot(self.engine, cfg, self.plan)
        native = self.engine.native_inputs(cfg)
        check_server_environments(cfg.env)
        self.spec: Spec = load_agent_spec(agent if agent is not None else cfg.agent)
        _check_agent_roles(self.spec, cfg.rollout, self.plan)
        _check_rebuild(self.spec, [server.name for server in cfg.env])
        self.reward = RewardFunction.load(
            reward_func if reward_func is not None else cfg.reward.fn or native.reward,
            kwargs=_reward_kwargs(cfg.reward.kwargs, native.reward_kwargs),
        )
        cfg.reward.kwargs = dict(self.reward.kwargs)
        cfg.reward.fn = self.reward.reference
        _check_reward_reaches(self.reward, self.spec)
        train_source = train_dataset if train_dataset is not None else cfg.data.train
        test_source = test_dataset if test_dataset is not None else cfg.data.test
        if train_source is None and test_source is None and not native.has_train_files:
            raise DatasetError(
                "no dataset: pass train_dataset/test_dataset or set data.train/data.test in the config"
            )
        self.train_tasks: list[Task] = self._tasks(train_source, "train_dataset")
        self.test_tasks: list[Task] = self._tasks(test_source, "test_dataset")
        if cfg.data.max_test:
            self.test_tasks = self.test_tasks[: cfg.data.max_test]
        for source, key in ((train_source, "train"), (test_source, "test")):
            if isinstance(source, str | Path):
                setattr(cfg.data, key, str(source))
        # the agent's MCP servers answer now, or the run is refused before any model loads
        check_mcp_servers(self.spec, [server.name for server in cfg.env])
        _check_lengths(cfg, check_model(cfg.model))
        if run_path is not None:
            cfg.trainer.run_dir = str(run_path)
        self.run_dir = Path(cfg.trainer.run_dir)
        if isinstance(self.spec, ProcessAgent) and self.spec.log_dir is None:  # its log beside the run's
            self.spec = self.spec.model_copy(update={"log_dir": str((self.run_dir / "agent_logs").resolve())})
        writable = run_folder_writable(self.run_dir)
        if not writable.ok:
            raise ConfigError(writable.detail)

    def _tasks(self, source: Any, what: str) -> list[Task]:
        if source is None:
            return []
        return load_tasks(source, self.config.data.prompt_key, self.config.data.answer_key, what)

    def run_inputs(self) -> RunInputs:
        """What the engine receives: everything checked here, frozen."""
        user_set = set(self.config.fields_set()) | {"reward.fn"}  # the engine must run our reward
        user_set |= {"data.train"} if self.train_tasks else set()
        user_set |= {"data.test"} if self.test_tasks else set()
        return RunInputs(
            config=self.config.model_copy(deep=True),
            spec=self.spec,
            reward=self.reward,
            train_tasks=tuple(self.train_tasks),
            test_tasks=tuple(self.test_tasks),
            run_dir=self.run_dir,
            plan=self.plan,
            user_set=frozenset(user_set),
        )

    def render(self) -> RenderedRun | None:
        """Write the engine's run folder without launching it (None for the local backend)."""
        return self.engine.render(self.run_inputs())

    def train(self, resume: bool = False):
        if not self.train_tasks and not self.engine.native_inputs(self.config).has_train_files:
            raise DatasetError("train_dataset is missing: pass train_dataset or set data.train")
        result = self.engine.train(self.run_inputs(), resume=resume)
        return self._with_held_out(result)

    def _with_held_out(self, result: Any) -> Any:
        """Every engine's run ends with one line, computed one way from the run folder's
        evaluation token files: held-out figures before and after (also in the result)."""
        from dataclasses import asdict

        from aworld_train.evaluation.held_out import held_out
        from aworld_train.evaluation.run_summary import held_out_figures, held_out_line

        held = held_out(self.config)
        figures = held_out_figures(self.run_dir, held.k)
        print(held_out_line(self.config.backend, figures, held), flush=True)
        if isinstance(result, dict):
            result["held_out"] = {label: asdict(f) if f else None for label, f in figures.items()}
        return result

    def evaluate(self, output: str | Path | None = None, show_progress: bool = True):
        """Run the agent over the test set with the configured model, as a run evaluates
        (`trainer.eval_*`); returns an EvalReport."""
        if not self.test_tasks:
            raise DatasetError("test_dataset is missing: pass test_dataset or set data.test")
        from aworld_train.evaluation.held_out import held_out
        from aworld_train.evaluation.report import evaluate_held_out
        from aworld_train.prerun.servers import running_envs
        from aworld_train.rollout.episodes.runner import local_runner
        from aworld_train.rollout.policies.router import PolicyRouter

        runner, policy = local_runner(self.spec, self.config.model, self.config.rollout, self.reward)
        router = PolicyRouter(policy)  # the configured model serves every agent
        with running_envs(self.config.env, self.run_dir):
            try:
                held = held_out(self.config)
                report = asyncio.run(evaluate_held_out(runner, router, self.test_tasks, held, show_progress))
            finally:
                runner.close()  # the rollout worker processes, if any
        report.write_jsonl(Path(output) if output else self.run_dir / "eval_trajectories.jsonl")
        return report

    def evaluate_suite(
        self, output: str | Path | None = None, out_dir: str | Path | None = None, on_report=None
    ):
        """`config.eval`: every checkpoint under every seed, k samples per task; writes the table
        (markdown, CSV), the plot and the trajectories; returns the SuiteResult."""
        if not self.test_tasks:
            raise DatasetError("test_dataset is missing: pass test_dataset or set data.test")
        from aworld_train.evaluation.suite import run_suite

        ev = self.config.eval
        return run_suite(
            self.config,
            self.spec,
            self.test_tasks,
            self.reward,
            out_dir=out_dir or ev.out_dir or self.run_dir / "eval",
            trajectories_path=output,
            on_report=on_report,
        )


def _check_settings() -> None:
    """The environment variables read later, when a model loads or an episode starts."""
    from aworld_train.aworld.trims import aworld_log_level

    dtype_setting()
    aworld_log_level()


def _check_lengths(cfg: TrainConfig, context: int | None) -> None:
    """Token limits the model cannot hold would fail mid-run (position ids past the context)."""
    if context is None:
        return
    for field in ("max_new_tokens", "max_total_tokens", "max_prompt_tokens"):
        value = getattr(cfg.rollout, field)
        if value is not None and value > context:
            raise ConfigError(
                f"rollout.{field}={value} is beyond {cfg.model}'s context of {context} tokens: "
                f"set it to {context} or less"
            )


def _reward_kwargs(common: dict[str, Any], native: dict[str, Any]) -> dict[str, Any]:
    """`reward.kwargs` and the native section's reward settings together; a key set to two
    different values is an error, not a silent choice."""
    clash = sorted(k for k in set(common) & set(native) if common[k] != native[k])
    if clash:
        raise ConfigError(
            "reward.kwargs and the native config's reward settings differ on "
            + ", ".join(f"{k} ({common[k]!r} vs {native[k]!r})" for k in clash)
            + "; keep one of them"
        )
    return {**native, **common}


def _check_agent_roles(spec: Spec, rollout: RolloutSettings, plan: PolicyPlan) -> None:
    """The plan's policies, `rollout.frozen_agents` and `rollout.agent_endpoints` name agents of the
    spec, and leave one to train."""
    names = [role.name for role in spec.roles()]
    problem = team_problem(plan, names, list(rollout.agent_endpoints))
    if problem is not None:
        raise ConfigError(problem)
    for field, listed in (
        ("frozen_agents", rollout.frozen_agents),
        ("agent_endpoints", list(rollout.agent_endpoints)),
    ):
        for name in listed:
            if name not in names:
                raise ConfigError(
                    f"rollout.{field} names {name!r}, which is not an agent of {spec.name!r} "
                    f"({', '.join(names)}){did_you_mean(name, names)}: name agents of the swarm"
                )
    for name, endpoint in rollout.agent_endpoints.items():
        for key in ("base_url", "api_key"):
            try:
                resolve_env_refs(getattr(endpoint, key))
            except MissingVariable as exc:
                raise ConfigError(
                    f"rollout.agent_endpoints.{name}.{key} uses ${{{exc.name}}}, which is not set: "
                    "set it in the environment or in a .env file"
                ) from None
        problem = http_url_problem(resolve_env_refs(endpoint.base_url))
        if problem is not None:
            raise ConfigError(
                f"rollout.agent_endpoints.{name}.base_url {endpoint.base_url!r} resolves to no URL ({problem}): "
                "give the endpoint's base URL, e.g. http://host:8000/v1"
            )
    if set(names) <= set(rollout.frozen_agents) | set(rollout.agent_endpoints):
        raise ConfigError(
            f"rollout.frozen_agents and rollout.agent_endpoints leave no agent of {spec.name!r} to train; "
            "leave at least one agent out of them"
        )


def _check_reward_reaches(reward: RewardFunction, spec: Spec) -> None:
    """A reported reward comes from an agent process through its gateway session: an agent run in
    this process has no session to report to, and every episode would end as reward_error."""
    from aworld_train.rewards.reported import reported_reward

    if reward.fn is reported_reward and not isinstance(spec, ProcessAgent):
        raise ConfigError(
            f"reward.fn {reward.reference} reads the reward an agent process reports to its gateway "
            f"session, but {spec.name!r} runs in the trainer's process and never reports one: name a "
            "reward function that scores the trajectory, or run the agent as a ProcessAgent"
        )


def _check_process_agent(spec: ProcessAgent, env: dict[str, str]) -> None:
    """A process agent's program exists, its `${VAR}` references resolve, its gateway can listen
    where it says, and the process starts and answers the handshake, before any model loads."""
    _check_command(spec, env)
    why = is_local_address(spec.gateway_host)
    if why is not None:
        raise AgentSpecError(
            f"agent {spec.name!r}: gateway_host {spec.gateway_host!r} is not an address of this machine "
            f"({why}): use 127.0.0.1 (the default), 0.0.0.0 for every interface, or an address this "
            "machine has"
        )
    try:
        check_starts(spec, env)
    except RuntimeError as exc:
        raise AgentSpecError(str(exc)) from None


def _check_command(spec: ProcessAgent, env: dict[str, str]) -> None:
    """A process agent's program exists and its `${VAR}` references resolve."""
    program, cwd = spec.command[0], Path(spec.cwd or ".")
    if spec.cwd is not None and not cwd.is_dir():
        raise AgentSpecError(f"agent {spec.name!r}: cwd {spec.cwd!r} is not a folder; fix the path")
    found = shutil.which(program) if os.sep not in program else (cwd / program).is_file()
    if not found:
        raise AgentSpecError(
            f"agent {spec.name!r}: its command's program {program!r} is not found "
            f"({'on PATH' if os.sep not in program else f'under {cwd.resolve()}'}); fix `command`"
        )
    for key, value in spec.env.items():
        try:
            resolve_env_refs(value, env)
        except MissingVariable as exc:
            raise AgentSpecError(
                f"agent {spec.name!r}: env.{key} uses ${{{exc.name}}}, which is not set: "
                "set it in the environment or in a .env file"
            ) from None


def _check_rebuild(spec: Spec, env_servers: list[str]) -> None:
    """A worker rebuilds the agent from its spec: make sure that works now, not on a GPU node.
    The `<NAME>_MCP_URL` of the config's `env:` servers count as set: the run exports them."""
    exported = {url_variable(name): "http://127.0.0.1:1/mcp" for name in env_servers}
    llm = {"llm_provider": "aworld_train", "llm_base_url": "aworld-train://check"}
    env = {**exported, **os.environ}
    if isinstance(spec, ProcessAgent):
        _check_process_agent(spec, env)
        return
    try:
        if isinstance(spec, SwarmSpec):
            build_swarm(spec, lambda name: llm, env=env)
        else:
            build_agent(spec, llm=llm, env=env)
    except AgentSpecError as exc:
        raise AgentSpecError(f"agent cannot be rebuilt from its spec, as workers must: {exc}") from None
