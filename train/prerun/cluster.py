"""A run that joins a Ray cluster is checked from every node before it launches (and claims a GPU):
each alive node, in a Ray task pinned to it, reads the run folder, imports aworld-train, resolves the
agent spec's `${VAR}` references in its own environment (secrets are never forwarded: they must be
set where `ray start` ran), and reaches the agent's shared services (MCP servers named by a
non-loopback URL, with their headers). Every problem names its node and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from aworld_train.core.protocol import ENV_REF
from aworld_train.prerun.checks import Check

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def shared_services(mcp_config: dict[str, Any], env_servers: list[str]) -> dict[str, dict[str, Any]]:
    """The agent's HTTP MCP servers the run does not start (`env:`): each node must reach those
    named by a non-loopback URL as they are (a loopback one is that node's own business)."""
    return {
        name: conf
        for name, conf in (mcp_config.get("mcpServers") or {}).items()
        if name not in env_servers and isinstance(conf, dict) and conf.get("url")
    }


def probe_node(folder: str, variables: list[str], services: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Run on one node: what the run needs there."""
    import os
    import socket

    import httpx

    from aworld_train.core.protocol import MissingVariable, resolve_env_refs

    answer: dict[str, Any] = {"node": socket.gethostname(), "problems": []}
    try:
        import ray

        answer["node"] = ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - the host name names it then
        pass
    if not Path(folder).is_dir():
        answer["problems"].append(
            f"the run folder {folder} is not there: put trainer.run_dir on a path every node mounts (NFS)"
        )
    missing = [name for name in variables if name not in os.environ]
    if missing:
        answer["problems"].append(
            f"{', '.join(missing)} not set: set them in the environment of `ray start` on this node"
        )
    for name, conf in services.items():
        try:
            resolved = resolve_env_refs(conf)
        except MissingVariable:
            continue  # reported above
        if urlparse(resolved["url"]).hostname in _LOOPBACK:
            continue
        try:
            reply = httpx.get(resolved["url"], headers=resolved.get("headers") or {}, timeout=5)
        except httpx.HTTPError as exc:
            answer["problems"].append(f"MCP server {name!r} at {resolved['url']} does not answer ({exc})")
            continue
        if reply.status_code in (401, 403):
            answer["problems"].append(
                f"MCP server {name!r} at {resolved['url']} refused its headers (HTTP {reply.status_code}): "
                "check its bearer token on this node"
            )
    return answer


def cluster_checks(
    address: str,
    run_folder: Path,
    spec_yaml: str,
    mcp_config: dict[str, Any],
    *,
    env_servers: list[str],
    env: dict[str, str],
) -> list[Check]:
    """One check per alive node of the cluster at `address` (see the module)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    references = [m.group(1) for m in ENV_REF.finditer(spec_yaml) if m.group(2) is None]
    variables = sorted(set(references) - set(env))
    services = shared_services(mcp_config, env_servers)
    try:
        ray.init(address=address, runtime_env={"env_vars": env}, log_to_driver=False, logging_level="ERROR")
    except Exception as exc:  # noqa: BLE001 - any failure to join is the one answer
        return [Check("Ray cluster reachable", False, f"{address}: {type(exc).__name__}: {exc}")]
    try:
        nodes = [n for n in ray.nodes() if n["Alive"]]
        probe = ray.remote(num_cpus=0)(probe_node)
        pending = [
            probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
                str(run_folder), variables, services
            )
            for n in nodes
        ]
        checks = [Check("Ray cluster reachable", True, f"{address}: {len(nodes)} nodes")]
        for node, ref in zip(nodes, pending, strict=True):
            label = f"node {node.get('NodeManagerAddress', node['NodeID'][:12])}"
            try:
                answer = ray.get(ref, timeout=120)
            except Exception as exc:  # noqa: BLE001 - e.g. aworld-train not installed there
                checks.append(
                    Check(label, False, f"{type(exc).__name__}: {str(exc)[:300]}: install aworld-train there")
                )
                continue
            problems = answer["problems"]
            checks.append(Check(label, not problems, "; ".join(problems) or "run folder, settings, services"))
        return checks
    finally:
        ray.shutdown()
