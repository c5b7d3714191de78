"""`python -m aworld_train.env NAME [--port N] [--transport http|stdio] [--host H]`."""

from __future__ import annotations

import argparse

from aworld_train.env.launcher import SERVERS, import_serve


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m aworld_train.env")
    parser.add_argument("name", choices=sorted(SERVERS))
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--transport", choices=["http", "stdio"], default="http")
    args = parser.parse_args(argv)
    import_serve(args.name)(transport=args.transport, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
