"""One destination per request: the request's own naming of its target must agree with where it goes. Pure.

The proxy dials `destination` (the CONNECT target inside a tunnel, the request's host for a plain-proxy
request). Inside a tunnel, an absolute-form target or HTTP/2 `:authority`, and the Host header, must name that
host and, when they name a port, that port: anything else is `egress.authority_mismatch` (a shared front end
would otherwise route the request — and any secret injected into it — to the host it names). Plain-proxy
requests keep the Host check (`egress.host_mismatch`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from gateway.net.hosts import parse_authority


@dataclass(frozen=True)
class TargetArgs:
    destination: tuple[str, int]        # normalised host and port the proxy dials
    in_tunnel: bool
    authority: str = ""                 # absolute-form authority or :authority ("" when absent)
    host_headers: Sequence[str] = ()    # every Host header value


@dataclass(frozen=True)
class TargetVerdict:
    code: str
    reason: str


AUTHORITY_MISMATCH = "egress.authority_mismatch"
HOST_MISMATCH = "egress.host_mismatch"


def _mismatch(text: str, destination: tuple[str, int]) -> str:
    """"" when `text` names `destination` (a missing port agrees); "host" or "port" when it names another."""
    try:
        host, port = parse_authority(text.strip())
    except ValueError:
        return "host"
    if host != destination[0]:
        return "host"
    return "port" if port is not None and port != destination[1] else ""


def check_target(args: TargetArgs) -> TargetVerdict | None:
    """None when the request names only its destination; else why not."""
    if len(args.host_headers) > 1:
        return TargetVerdict(HOST_MISMATCH, "the request carries more than one Host header")
    if args.in_tunnel and args.authority and _mismatch(args.authority, args.destination):
        return TargetVerdict(AUTHORITY_MISMATCH, "the request names another host or port than its tunnel's")
    for named in args.host_headers:
        wrong = _mismatch(named, args.destination)
        if wrong == "host":
            return TargetVerdict(HOST_MISMATCH, "the Host header does not match the destination")
        if wrong == "port" and args.in_tunnel:
            return TargetVerdict(AUTHORITY_MISMATCH, "the Host header names another port than its tunnel's")
    return None
