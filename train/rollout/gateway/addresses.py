"""Where the gateway listens and the address its sessions' base URLs name."""

from __future__ import annotations

import ipaddress
import socket

WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def advertised_host(host: str) -> str:
    """The host a session's base URL names for a gateway listening on `host`: `host` itself, or for
    a wildcard binding (0.0.0.0, ::) this machine's address, which an agent in a container or on
    another node can dial (`0.0.0.0` is no address to connect to)."""
    if host not in WILDCARD_HOSTS:
        return host
    family, probe = (socket.AF_INET6, "2001:db8::1") if host == "::" else (socket.AF_INET, "192.0.2.1")
    try:
        # a UDP socket's connect only picks the interface a packet to `probe` (a documentation
        # address) would leave by: nothing is sent
        with socket.socket(family, socket.SOCK_DGRAM) as probe_socket:
            probe_socket.connect((probe, 9))
            return probe_socket.getsockname()[0]
    except OSError:  # no route out: the host's name, as its resolver knows it
        return socket.gethostname()


def host_in_url(host: str) -> str:
    try:
        return f"[{host}]" if ipaddress.ip_address(host).version == 6 else host
    except ValueError:
        return host  # a name


def is_local_address(host: str) -> str | None:
    """None if a server can listen on `host` here (an address of this machine, or a wildcard); else why not."""
    if host in WILDCARD_HOSTS:
        return None
    try:
        family, kind, _, _, address = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind) as probe:
            probe.bind(address)
    except OSError as exc:
        return str(exc)
    return None
