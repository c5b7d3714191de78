"""BFCL multi-turn: an MCP server over the `bfcl-eval` package's environments, state per episode.

`bfcl-eval` is installed with `--no-deps` (see the Makefile) and imported lazily,
so that importing `aworld_train.env` never needs it.
"""
