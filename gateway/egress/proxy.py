"""Embedding mitmproxy 12 in sandgate's loop through its master API (never a subprocess)."""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from mitmproxy.options import Options
from mitmproxy.tools.dump import DumpMaster

from gateway.egress.addon import EgressAddon
from gateway.egress.hosts import parse_allow_entry
from gateway.egress.layers import LayerGate
from gateway.egress.tls import write_upstream_bundle

if TYPE_CHECKING:
    from gateway.app import Gateway


class Ready:
    """A tiny addon that signals when mitmproxy's servers are up."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def running(self) -> None:
        self.event.set()


def build_master(gw: "Gateway", host: str, port: int) -> tuple[DumpMaster, Ready, EgressAddon]:
    cfg = gw.cfg
    egress = cfg.raw["egress"]
    opts = Options(listen_host=host, listen_port=port, confdir=str(cfg.data_dir))
    master = DumpMaster(opts, with_termlog=False, with_dumper=False)
    bundle = write_upstream_bundle(cfg.data_dir, egress["upstream_ca"])
    # sandgate decides every layer itself (layers.LayerGate): mitmproxy's heuristics, its raw-TCP fallback and
    # its SNI/Host-matching ignore_hosts are switched off, and its NextLayer addon is replaced.
    master.options.update(
        connection_strategy="lazy",
        block_global=False,
        onboarding=False,
        ssl_verify_upstream_trusted_ca=str(bundle),
        rawtcp=False,
        ignore_hosts=[],
        allow_hosts=[],
        tcp_hosts=[],
    )
    master.addons.remove(master.addons.get("nextlayer"))
    ready = Ready()
    addon = EgressAddon(gw)
    gate = LayerGate(raw_tcp=[parse_allow_entry(e) for e in egress["raw_tcp"]],
                     passthrough=[parse_allow_entry(e) for e in egress["passthrough"]],
                     audit=gw.audit, session_of=addon.session_of, connection_valid=addon.connection_valid,
                     on_refused=lambda code: gw.metrics.decision("egress", "deny"))
    master.addons.add(ready, gate, addon)
    return master, ready, addon
