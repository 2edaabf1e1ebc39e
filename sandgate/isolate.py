"""`sandgate run --isolate`: the network namespace a command runs in, set up and torn down with `ip` and `nft`.

The decisions (which link, which rules) are the pure functions of `sandgate.isolation`; this module runs
the commands. `isolated_network()` allocates a link under a lock (concurrent runs never take the same one),
creates the namespace and the veth pair, and on the way out removes the nftables table, the namespace (its
veth end goes with it), the host end and the namespace's resolv.conf — also when the run failed.
"""
from __future__ import annotations

import asyncio
import fcntl
import ipaddress
import json
import os
import shutil
import subprocess
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator, Sequence

from sandgate.isolation import (IsolationError, Link, loopback_target, pick_link, render_ruleset,
                                   resolv_conf)

LOCK_PATH = Path("/run/sandgate/isolate.lock")
NETNS_ETC = Path("/etc/netns")
COMMAND_TIMEOUT_S = 20.0


def preflight() -> None:
    """IsolationError unless this process can build namespaces: root, `ip` and `nft`."""
    if os.geteuid() != 0:
        raise IsolationError("--isolate needs root (network namespaces and nftables rules)")
    for binary, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(binary) is None:
            raise IsolationError(f"--isolate needs the {binary} command (package {package})")


def _sh(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(args), input=stdin, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if check and proc.returncode != 0:
        raise IsolationError(f"{' '.join(args[:4])} failed: {(proc.stderr or proc.stdout).strip()[:300]}")
    return proc


def _in_use() -> tuple[list[ipaddress.IPv4Network | ipaddress.IPv6Network], set[str]]:
    """Networks of every address on the host, and the interface, namespace and nftables table names taken."""
    networks, names = [], set()
    for iface in json.loads(_sh("ip", "-j", "addr", "show").stdout or "[]"):
        names.add(iface.get("ifname", ""))
        for info in iface.get("addr_info", []):
            try:
                networks.append(ipaddress.ip_network(f"{info['local']}/{info['prefixlen']}", strict=False))
            except (KeyError, ValueError):
                continue
    netns = _sh("ip", "-j", "netns", "list", check=False).stdout.strip()
    names.update(ns.get("name", "") for ns in (json.loads(netns) if netns else []))
    tables = _sh("nft", "-j", "list", "tables", check=False).stdout.strip()
    for item in (json.loads(tables).get("nftables", []) if tables else []):
        if "table" in item:
            names.add(item["table"].get("name", ""))
    return networks, names


def _create(link: Link) -> None:
    ns = ["ip", "netns", "exec", link.netns]
    _sh("ip", "netns", "add", link.netns)
    _sh("ip", "link", "add", link.host_if, "type", "veth", "peer", "name", link.sandbox_if, "netns", link.netns)
    for key in ("disable_ipv6=1", "route_localnet=1"):
        family = "ipv6" if key.startswith("disable") else "ipv4"
        _sh("sysctl", "-qw", f"net.{family}.conf.{link.host_if}.{key}")
    _sh("ip", "addr", "add", f"{link.gateway}/30", "dev", link.host_if)
    _sh("ip", "link", "set", link.host_if, "up")
    _sh(*ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
    _sh(*ns, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
    _sh(*ns, "ip", "link", "set", "lo", "up")
    _sh(*ns, "ip", "addr", "add", f"{link.sandbox}/30", "dev", link.sandbox_if)
    _sh(*ns, "ip", "link", "set", link.sandbox_if, "up")
    _sh(*ns, "ip", "route", "add", "default", "via", link.gateway)


def _allocate() -> Link:
    """Pick a free link and create its namespace, under an exclusive lock."""
    LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK_PATH, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        networks, names = _in_use()
        link = pick_link(networks, names)
        try:
            _create(link)
        except Exception:
            _teardown(link)
            raise
        return link


def _capture(link: Link, proxy: tuple[str, int], dns: tuple[str, int]) -> None:
    etc = NETNS_ETC / link.netns
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "resolv.conf").write_text(resolv_conf(link))
    _sh("nft", "-f", "-", stdin=render_ruleset(link, proxy, dns))


def _teardown(link: Link) -> list[str]:
    """Remove everything of `link` that exists; the problems met (never raises)."""
    problems = []
    for args in (("nft", "delete", "table", "inet", link.table), ("ip", "netns", "del", link.netns),
                 ("ip", "link", "del", link.host_if)):
        try:
            _sh(*args, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            problems.append(f"{' '.join(args)}: {exc}")
    shutil.rmtree(NETNS_ETC / link.netns, ignore_errors=True)
    return problems


class IsolatedNetwork:
    """One sandbox namespace: `capture()` once sandgate's listeners are known, `command()` to run in it."""

    def __init__(self, link: Link):
        self.link = link

    async def capture(self, transparent: str, dns: str) -> None:
        """Install the capture rules towards the transparent listener and resolver ("HOST:PORT" each)."""
        proxy_at, dns_at = loopback_target(transparent), loopback_target(dns)
        await asyncio.to_thread(_capture, self.link, proxy_at, dns_at)

    def command(self, cmd: Sequence[str]) -> list[str]:
        """`cmd` run inside the namespace (ip netns exec execs it: same process, its exit status and signals)."""
        return ["ip", "netns", "exec", self.link.netns, *cmd]


@asynccontextmanager
async def isolated_network() -> AsyncIterator[IsolatedNetwork]:
    preflight()
    link = await asyncio.to_thread(_allocate)
    try:
        yield IsolatedNetwork(link)
    finally:
        await asyncio.shield(asyncio.to_thread(_teardown, link))
