"""MCP tool servers, each startable alone (`aworld-train env up NAME`) or by a run."""

from aworld_train.env.launcher import SERVERS, RunningServer, start_server

__all__ = ["SERVERS", "RunningServer", "start_server"]
