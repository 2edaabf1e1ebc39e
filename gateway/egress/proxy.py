"""Embedding mitmproxy 11 in sandgate's loop through its master API (never a subprocess)."""
from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

from mitmproxy.options import Options
from mitmproxy.tools.dump import DumpMaster

from gateway.egress.addon import EgressAddon
from gateway.egress.hosts import parse_allow_entry
from gateway.egress.tls import write_upstream_bundle

if TYPE_CHECKING:
    from gateway.app import Gateway


def passthrough_patterns(entries: list[str]) -> list[str]:
    """`egress.passthrough` entries -> mitmproxy ignore_hosts regexes (matched against 'host:port')."""
    out = []
    for text in entries:
        entry = parse_allow_entry(text)
        port = str(entry.port) if entry.port else r"\d+"
        if entry.host.startswith("*."):
            host = r"(?:[^:/]+\.)" + re.escape(entry.host[2:])
        else:
            host = re.escape(entry.host.strip("[]"))
        out.append(rf"^\[?{host}\]?:{port}$")
    return out


class Ready:
    """A tiny addon that signals when mitmproxy's servers are up."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def running(self) -> None:
        self.event.set()


def build_master(gw: "Gateway", host: str, port: int) -> tuple[DumpMaster, Ready, EgressAddon]:
    cfg = gw.cfg
    opts = Options(listen_host=host, listen_port=port, confdir=str(cfg.data_dir))
    master = DumpMaster(opts, with_termlog=False, with_dumper=False)
    bundle = write_upstream_bundle(cfg.data_dir, cfg.raw["egress"]["upstream_ca"])
    master.options.update(
        connection_strategy="lazy",
        block_global=False,
        onboarding=False,
        ssl_verify_upstream_trusted_ca=str(bundle),
        ignore_hosts=passthrough_patterns(list(cfg.raw["egress"]["passthrough"])),
    )
    ready = Ready()
    addon = EgressAddon(gw)
    master.addons.add(ready, addon)
    return master, ready, addon
