"""`sandgate run --isolate`: the sandbox's link and the rules that capture it, as pure functions of plain values.

A sandbox namespace is joined to the host by one veth pair on a /30 of `LINK_NET` (gateway .1 on the host
side, sandbox .2). Its only route is the gateway. On the host side, one nftables table per sandbox (removed
with it) takes every packet arriving from the sandbox's interface:

- TCP to any address and port: DNAT to sandgate's transparent listener (which reads the original destination
  back with SO_ORIGINAL_DST);
- UDP to port 53 of any address: DNAT to the filtering resolver;
- everything else (other UDP, ICMP, IPv6, packets to be forwarded) is dropped, and the input chain accepts
  from that interface only what was redirected to those two listeners.

The rules sit on the host side because root inside the sandbox's namespace can change that namespace's own
rules. The listeners stay on loopback: `route_localnet` on the host end of the veth lets DNAT reach 127/8.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Iterable

LINK_NET = ipaddress.IPv4Network("10.200.0.0/17")      # /30 links; 10.200.128.0/17 is the synthetic pool
MAX_LINKS = LINK_NET.num_addresses // 4


class IsolationError(Exception):
    """The namespace cannot be set up as asked (one line for the user)."""


@dataclass(frozen=True)
class Link:
    index: int
    netns: str                 # `ip netns` name
    host_if: str               # the host end of the veth pair (interface names are at most 15 bytes)
    sandbox_if: str
    network: ipaddress.IPv4Network
    table: str                 # the nftables table (family inet) of this sandbox

    @property
    def gateway(self) -> str:
        return str(self.network.network_address + 1)

    @property
    def sandbox(self) -> str:
        return str(self.network.network_address + 2)


def link_for(index: int) -> Link:
    if not 0 <= index < MAX_LINKS:
        raise IsolationError(f"no sandbox link number {index}")
    network = ipaddress.IPv4Network((int(LINK_NET.network_address) + 4 * index, 30))
    return Link(index, f"sandgate-{index}", f"sgi{index}h", f"sgi{index}s", network, f"sandgate_{index}")


def pick_link(used: Iterable[ipaddress.IPv4Network | ipaddress.IPv6Network], names: Iterable[str]) -> Link:
    """The first link whose /30 overlaps no address in use on the host and whose names are free."""
    nets = [n for n in used if n.version == 4]
    taken = set(names)
    for index in range(MAX_LINKS):
        link = link_for(index)
        if any(link.network.overlaps(n) for n in nets):
            continue
        if {link.netns, link.host_if, link.sandbox_if, link.table} & taken:
            continue
        return link
    raise IsolationError("every sandbox link in 10.200.0.0/17 is in use")


def loopback_target(hostport: str) -> tuple[str, int]:
    """Where DNAT sends captured packets: a listener ("HOST:PORT") bound on IPv4 loopback (a wildcard bind is
    reached at 127.0.0.1). IsolationError for anything else: capture only works on the machine sandgate runs on."""
    host, sep, port = hostport.rpartition(":")
    host = host.strip("[]")
    try:
        addr = ipaddress.ip_address(host) if host else ipaddress.IPv4Address("0.0.0.0")
        number = int(port) if sep and port.isdigit() else 0
    except ValueError:
        addr, number = None, 0
    if addr is not None and addr.version == 4 and addr.is_unspecified:
        addr = ipaddress.IPv4Address("127.0.0.1")
    if addr is None or addr.version != 4 or not addr.is_loopback or not 0 < number < 65536:
        raise IsolationError(f"the listener {hostport} is not on this machine's IPv4 loopback; run --isolate "
                             f"needs a sandgate on this machine (or none: it then starts one)")
    return str(addr), number


def render_ruleset(link: Link, proxy: tuple[str, int], dns: tuple[str, int]) -> str:
    """The nftables script (`nft -f -`) of one sandbox's capture on the host side."""
    iface = link.host_if
    (phost, pport), (dhost, dport) = proxy, dns
    return f"""table inet {link.table} {{
  chain prerouting {{
    type nat hook prerouting priority dstnat; policy accept;
    iifname "{iface}" meta nfproto ipv4 meta l4proto tcp dnat ip to {phost}:{pport}
    iifname "{iface}" meta nfproto ipv4 udp dport 53 dnat ip to {dhost}:{dport}
  }}
  chain input {{
    type filter hook input priority filter; policy accept;
    iifname "{iface}" ip saddr {link.sandbox} ct status dnat ip daddr {phost} tcp dport {pport} accept
    iifname "{iface}" ip saddr {link.sandbox} ct status dnat ip daddr {dhost} udp dport {dport} accept
    iifname "{iface}" drop
  }}
  chain forward {{
    type filter hook forward priority filter; policy accept;
    iifname "{iface}" drop
    oifname "{iface}" drop
  }}
}}
"""


def resolv_conf(link: Link) -> str:
    """The sandbox's /etc/resolv.conf: the gateway only (its port 53 is the filtering resolver), no search list."""
    return f"# sandgate run --isolate: the filtering resolver\nnameserver {link.gateway}\noptions timeout:2 attempts:2\n"


PROXY_VARIABLES = frozenset({"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy",
                             "ALL_PROXY", "all_proxy"})


def isolated_env(env: dict[str, str]) -> dict[str, str]:
    """An isolated command's environment: no proxy variables (everything is captured; the proxy listener is not
    reachable from the namespace), the CA and placeholder variables kept."""
    return {k: v for k, v in env.items() if k not in PROXY_VARIABLES}
