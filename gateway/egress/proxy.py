"""Embedding mitmproxy 12 in sandgate's loop through its master API (never a subprocess)."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from mitmproxy.options import Options
from mitmproxy.tools.dump import DumpMaster

from gateway.egress.dispatch import HookTable
from gateway.egress.tls import write_upstream_bundle


@dataclass(frozen=True)
class MasterSettings:
    listen: tuple[str, int]
    confdir: Path                    # mitmproxy's CA lives here (the data dir)
    upstream_ca: str = ""            # extra CA bundle trusted upstream, on top of the public roots
    transparent: tuple[str, int] | None = None       # a second, transparent-mode listener (configured only when used)


def mode_specs(settings: MasterSettings) -> list[str]:
    """mitmproxy's `mode` option: the regular proxy (on listen_host/listen_port), and the transparent listener."""
    modes = ["regular"]
    if settings.transparent is not None:
        host, port = settings.transparent
        modes.append(f"transparent@{f'[{host}]' if ':' in host else host}:{port}")
    return modes


class Ready:
    """A tiny addon that signals when mitmproxy's servers are up."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def running(self) -> None:
        self.event.set()


def build_master(addons: Sequence[object], settings: MasterSettings) -> tuple[DumpMaster, Ready]:
    """A master running `addons` (in order, after mitmproxy's own) with sandgate's options."""
    host, port = settings.listen
    opts = Options(listen_host=host, listen_port=port, confdir=str(settings.confdir))
    master = DumpMaster(opts, with_termlog=False, with_dumper=False)
    HookTable.install(master.addons)        # the same hooks in the same order, looked up once (dispatch.py)
    bundle = write_upstream_bundle(settings.confdir, settings.upstream_ca)
    # sandgate decides every layer itself (layers.LayerGate): mitmproxy's heuristics, its raw-TCP fallback and
    # its SNI/Host-matching ignore_hosts are switched off, and its NextLayer addon is replaced.
    master.options.update(
        mode=mode_specs(settings),
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
    master.addons.add(ready, *addons)
    return master, ready
