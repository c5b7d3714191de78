"""`python -m aworld_train.env NAME [--port N] [--transport http|stdio] [--host H]`."""

from __future__ import annotations

import argparse

from aworld_train.env.launcher import SERVERS, import_serve, server_options


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m aworld_train.env")
    parser.add_argument("name", choices=sorted(SERVERS))
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--transport", choices=["http", "stdio"], default="http")
    parser.add_argument("--env", help="agentgym: the AgentGym environment's name")
    parser.add_argument("--server", help="agentgym: the AgentGym environment server's URL")
    args = parser.parse_args(argv)
    serve = import_serve(args.name)
    options = server_options(args.name, serve, env=args.env, server=args.server)
    serve(transport=args.transport, host=args.host, port=args.port, **options)


if __name__ == "__main__":
    main()
