"""`aworld-train`: run, eval, sft, render, check, export, view, env up, data."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from aworld_train.core.errors import AworldTrainError, ConfigError


def _trainer(args):
    from aworld_train.facade.trainer import AgentTrainer

    return AgentTrainer(config=args.config, overrides=args.overrides)


def cmd_run(args) -> int:
    trainer = _trainer(args)
    result = trainer.train(resume=args.resume)
    print(json.dumps(result, indent=2, default=str) if isinstance(result, dict) else result)
    return 0


def _eval_overrides(args) -> list[str]:
    """The eval flags as `eval.*` overrides (JSON values are YAML too)."""
    out = list(args.overrides)
    for flag, example in (("seeds", "--seeds 0 1 2"), ("checkpoints", "--checkpoints runs/calculator")):
        if getattr(args, flag) == []:
            raise ConfigError(
                f"--{flag} was given no value: list at least one, e.g. {example}, or leave it out"
            )
    for ref in args.checkpoints or []:
        if "=" in ref and not Path(ref).exists():
            raise ConfigError(
                f"--checkpoints got {ref!r}, an override: put key.sub=value overrides before --checkpoints"
            )
    for flag, key in (
        ("k", "k"),
        ("seeds", "seeds"),
        ("checkpoints", "checkpoints"),
        ("policy_url", "policy_url"),
        ("policy_model", "policy_model"),
        ("out_dir", "out_dir"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            out.append(f"eval.{key}={json.dumps(value)}")
    return out


def cmd_eval(args) -> int:
    from aworld_train.facade.trainer import AgentTrainer

    trainer = AgentTrainer(config=args.config, overrides=_eval_overrides(args))
    output = args.output or str(trainer.run_dir / "eval_trajectories.jsonl")

    def show(label: str, seed: int, report) -> None:
        print(f"{label} (seed {seed}): {report.text()}")
        print(json.dumps({"checkpoint": label, "seed": seed, **report.summary()}))

    suite = trainer.evaluate_suite(output=output, on_report=show)
    print(suite.markdown(), end="")
    print(f"table: {suite.table_md} {suite.table_csv}\nplot: {suite.plot}\ntrajectories: {output}")
    return 0


def cmd_sft(args) -> int:
    from aworld_train.facade.sft import run_sft

    result = run_sft(args.config, args.overrides, render_only=args.render)
    if result.get("command"):
        print(
            f"# verl SFT run folder: {result['run_folder']}\n# launch: {result['command']}", file=sys.stderr
        )
    print(json.dumps(result, indent=2, default=str))
    return 0


def cmd_render(args) -> int:
    from aworld_train.inputs.config import load_config

    config = load_config(args.config, args.overrides)
    if args.explain:  # the config alone: no dataset, agent or model is read
        from aworld_train.facade.explain import explain

        print(explain(config, args.config), end="")
        return 0
    if config.backend != "local":
        run = _trainer(args).render()
        print(run.config_text(), end="")
        env = "".join(f"{key}={value} " for key, value in run.env.items())
        print(f"# run folder: {run.folder}\n# launch: {env}{' '.join(run.command)}", file=sys.stderr)
        return 0
    text = _trainer(args).config.render()  # the datasets, reward and agent are checked too
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text)
    print(text, end="")
    return 0


def cmd_check(args) -> int:
    from aworld_train.prerun.checks import Check, run_checks

    try:
        trainer = _trainer(args)
    except AworldTrainError as exc:  # the inputs themselves: config, data, agent, reward, servers
        print(Check("inputs", False, str(exc)).line())
        return 2
    checks = run_checks(trainer.run_inputs(), trainer.engine)
    for check in checks:
        print(check.line())
    failed = [c for c in checks if not c.ok]
    print(
        f"{len(checks) - len(failed)} of {len(checks)} checks passed"
        + ("" if not failed else "; fix the FAIL lines")
    )
    return 2 if failed else 0


def cmd_env_up(args) -> int:
    from aworld_train.env.launcher import import_serve, server_options

    serve = import_serve(args.name)
    options = server_options(args.name, serve, env=args.env, server=args.server)
    if args.transport == "http":
        kind = "AgentGym-protocol HTTP" if args.name.startswith("agentgym-") else "MCP"
        path = "" if args.name.startswith("agentgym-") else "/mcp"
        print(
            f"{args.name} {kind} server on http://{args.host}:{args.port}{path} (Ctrl-C stops it)",
            file=sys.stderr,
        )
    serve(transport=args.transport, host=args.host, port=args.port, **options)
    return 0


def cmd_export(args) -> int:
    from aworld_train.engines.local.lora import export

    out = export(Path(args.checkpoint), Path(args.output), args.model)
    policies = sorted(p.parent.name for p in out.glob("*/config.json"))
    if policies:  # a run with a policy per agent: a merged model each
        print(f"merged models, one per policy: {', '.join(f'{out / name}' for name in policies)}")
    else:
        print(f"merged model: {out} (use it as model: {out})")
    return 0


def cmd_view(args) -> int:
    from aworld_train.viewer.server import serve

    serve(args.run_dirs, host=args.host, port=args.port)
    return 0


def cmd_data_agentgym(args) -> int:
    from aworld_train.env.agentgym.data import convert

    counts = convert(args.input, args.env, args.output, args.server, args.held_out, args.seed)
    print(", ".join(f"{n} {what}" for what, n in counts.items()) + f" rows written from {args.input}")
    return 0


def cmd_data_toolbench(args) -> int:
    from aworld_train.env.toolbench.data import run

    written = run(
        args.input,
        output=args.output,
        do_split=args.split,
        train_output=args.train_output,
        val_output=args.val_output,
        train_ratio=args.train_ratio,
        max_samples=args.max_samples,
        group=args.group,
        seed=args.seed,
    )
    for path, count in written.items():
        print(f"{count} rows -> {path}")
    return 0


def _with_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="training YAML")
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides")


def _add_training_commands(sub) -> None:
    """run, eval, sft, render, check: each reads a training YAML and its overrides."""
    run = sub.add_parser("run", help="train with the configured backend")
    _with_config(run)
    run.add_argument("--resume", action="store_true", help="continue from the run folder's latest checkpoint")
    run.set_defaults(func=cmd_run)

    ev = sub.add_parser(
        "eval",
        help="evaluate checkpoints on the test set: k samples per task, fixed seeds, pass@k and mean@k",
    )
    _with_config(ev)
    ev.add_argument("--output", help="all trajectories, JSONL (default: <run_dir>/eval_trajectories.jsonl)")
    ev.add_argument("--k", type=int, help="samples per task (eval.k)")
    # "*", not "+": a flag given no value is refused by _eval_overrides with the fix, not by argparse
    ev.add_argument("--seeds", type=int, nargs="*", help="one evaluation per seed (eval.seeds)")
    ev.add_argument(
        "--checkpoints",
        nargs="*",
        help="run folders, checkpoint folders or embedded:<name>, compared in one table (eval.checkpoints)",
    )
    ev.add_argument(
        "--policy-url", help="OpenAI-compatible completions endpoint returning token ids (eval.policy_url)"
    )
    ev.add_argument("--policy-model", help="model name sent to --policy-url (eval.policy_model)")
    ev.add_argument("--out-dir", help="table, plot and trajectories (default: <run_dir>/eval)")
    ev.set_defaults(func=cmd_eval)

    sft = sub.add_parser(
        "sft", help="supervised fine-tuning on multi-turn trajectories (loss on assistant tokens), then eval"
    )
    _with_config(sft)
    sft.add_argument(
        "--render",
        action="store_true",
        help="sft.backend verl: write the run folder and print the command only",
    )
    sft.set_defaults(func=cmd_sft)

    render = sub.add_parser("render", help="print the final config without running")
    _with_config(render)
    render.add_argument("--output", help="also write it to this file")
    render.add_argument(
        "--explain",
        action="store_true",
        help="print every setting instead: its value here (* where the config sets it), default and meaning",
    )
    render.set_defaults(func=cmd_render)

    check = sub.add_parser(
        "check", help="check packages, config, prompts, MCP servers and run folder before a run"
    )
    _with_config(check)
    check.set_defaults(func=cmd_check)


def _add_run_folder_commands(sub) -> None:
    """export and view: they read run folders and checkpoints."""
    export = sub.add_parser(
        "export", help="merge a LoRA checkpoint's adapter into its base: a plain model folder for model:"
    )
    export.add_argument("checkpoint", help="a LoRA run's checkpoint folder (or run folder: its latest)")
    export.add_argument("output", help="the merged model folder to write (new or empty)")
    export.add_argument("--model", help="the base model (default: the run's config.yaml model)")
    export.set_defaults(func=cmd_export)

    view = sub.add_parser(
        "view", help="a local web page over run folders: steps, GRPO groups, episodes token by token, drift"
    )
    view.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folders (trainer.run_dir)")
    view.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    view.add_argument("--port", type=int, default=8765, help="port to listen on (0: any free port)")
    view.set_defaults(func=cmd_view)


def _add_environment_commands(sub) -> None:
    """env up and the data converters."""
    env = sub.add_parser("env", help="tool environments")
    env_sub = env.add_subparsers(dest="env_command", required=True)
    up = env_sub.add_parser("up", help="start an MCP server in the foreground")
    up.add_argument("name")
    up.add_argument("--port", type=int, default=8765)
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--transport", choices=["http", "stdio"], default="http")
    up.add_argument(
        "--env", help="agentgym: the AgentGym environment's name (textcraft, babyai, webshop, ...)"
    )
    up.add_argument("--server", help="agentgym: the AgentGym environment server's URL")
    up.set_defaults(func=cmd_env_up)

    data = sub.add_parser("data", help="convert other projects' data to dataset rows")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    agentgym = data_sub.add_parser(
        "agentgym", help="AgentGym task lists or trajectory files (item_id, conversations) to JSONL rows"
    )
    agentgym.add_argument("input", help="AgentGym JSON list (or JSONL) of records")
    agentgym.add_argument("--env", required=True, help="the environment's name, e.g. textcraft")
    agentgym.add_argument("--output", required=True, help="rows JSONL to write")
    agentgym.add_argument("--server", help="an AgentGym server to read each item's task from")
    agentgym.add_argument(
        "--held-out", type=float, default=0.0, help="share of items for <output>.test.jsonl (by item, seeded)"
    )
    agentgym.add_argument("--seed", type=int, default=0)
    agentgym.set_defaults(func=cmd_data_agentgym)
    tb = data_sub.add_parser("toolbench", help="StableToolBench query files (query, query_id, api_list)")
    tb.add_argument(
        "--input", required=True, help="a query file, e.g. solvable_queries/.../G1_instruction.json"
    )
    tb.add_argument("--output", help="rows file: .parquet (verl), .jsonl or .json (default: <input>.parquet)")
    tb.add_argument("--split", action="store_true", help="write a seeded train/validation split")
    tb.add_argument("--train_output", help="with --split (default: <input>_train.parquet)")
    tb.add_argument("--val_output", help="with --split (default: <input>_val.parquet)")
    tb.add_argument("--train_ratio", type=float, default=0.9, help="share of rows in the train file")
    tb.add_argument("--max_samples", type=int, help="convert only the first N records")
    tb.add_argument(
        "--group", help="prefix of the row ids (default: the input file's name, e.g. G1_instruction)"
    )
    tb.add_argument("--seed", type=int, default=0, help="seed of the split's shuffle")
    tb.set_defaults(func=cmd_data_toolbench)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aworld-train", description="Train AWorld agents with GRPO.")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_training_commands(sub)
    _add_run_folder_commands(sub)
    _add_environment_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except AworldTrainError as exc:
        print(f"aworld-train: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("aworld-train: interrupted; the run folder keeps its logs and checkpoints", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
