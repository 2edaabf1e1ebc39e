"""Embedding mitmproxy 12 in sandgate's loop through its master API (never a subprocess)."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from mitmproxy import connection, ctx
from mitmproxy.certs import CertStore
from mitmproxy.options import Options
from mitmproxy.tools.dump import DumpMaster

from gateway.egress.dispatch import HookTableMaster
from gateway.egress.layers import install_websocket_cap
from gateway.egress.messages import install_fast_message_check
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


# mitmproxy addons that act only when an option sandgate never sets is set (addon -> that option). They stay out of
# the master: their request and response hooks would run on every request for nothing (MapLocal alone builds the
# request's URL each time), and a gateway has no use for mapping, replaying or rewriting traffic after its
# decision. build_master refuses to start if one of these options is ever set.
INERT_ADDONS: dict[str, str] = {
    "blocklist": "block_list", "anticache": "anticache", "anticomp": "anticomp", "serverplayback": "server_replay",
    "mapremote": "map_remote", "maplocal": "map_local", "modifybody": "modify_body",
    "modifyheaders": "modify_headers", "stickyauth": "stickyauth", "stickycookie": "stickycookie",
    "save": "save_stream_file", "savehar": "hardump", "upstreamauth": "upstream_auth", "proxyauth": "proxyauth",
    "onboarding": "onboarding",
}
# UpdateAltSvc rewrites Alt-Svc in reverse-proxy mode only; sandgate runs regular and transparent listeners.
INERT_UNLESS_REVERSE = "updatealtsvc"


def drop_inert_addons(master: DumpMaster) -> None:
    """Remove INERT_ADDONS (and UpdateAltSvc), after checking that none of them could act."""
    for name, option in INERT_ADDONS.items():
        if getattr(master.options, option):
            raise RuntimeError(f"mitmproxy option {option} is set, but sandgate runs without its addon {name}")
        master.addons.remove(master.addons.get(name))
    if any(spec.startswith("reverse") for spec in master.options.mode):
        raise RuntimeError("sandgate runs no reverse-proxy listener")
    master.addons.remove(master.addons.get(INERT_UNLESS_REVERSE))


class Ready:
    """A tiny addon that signals when mitmproxy's servers are up."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def running(self) -> None:
        self.event.set()


def close_client(client: connection.Client) -> None:
    """Close a client's socket now, for what a hook or a stream filter cannot do with a command: mitmproxy then
    sees the connection end and winds it down as for a client that went away. No-op once it is closed."""
    handler = ctx.master.addons.get("proxyserver").connections.get(client.id)
    io = handler.transports.get(client) if handler is not None else None
    if io is not None and io.writer is not None and not io.writer.is_closing():
        io.writer.close()


class CloseDisconnected:
    """Closes a client's socket once mitmproxy is done with the connection.

    mitmproxy's connection handler can end without closing the client socket: when sandgate kills a flow whose
    body is still arriving (a refused large upload, addon.refuse_large_body), `client_disconnected` runs with the
    socket still open and no task left to read or close it (the handler's cancellation can leave
    `handle_connection` before its `writer.close()`), so the client's send stalled until its own timeout instead
    of getting a reset. At `client_disconnected` the connection is over in every case."""

    def client_disconnected(self, client: connection.Client) -> None:
        close_client(client)


# The egress CA's name, the same whoever makes it: `serve` at its first start (below) and deploy/sandgate-keys.py.
CA_ORGANIZATION = "sandgate"
CA_COMMON_NAME = "sandgate egress CA"


def ensure_ca(confdir: Path) -> None:
    """The egress CA in `confdir` (mitmproxy's files, mitmproxy's own generator) named as sandgate's, made when
    there is none; an existing one (kept across restarts, or provisioned by sandgate-keys) is left as it is."""
    if not (confdir / "mitmproxy-ca.pem").exists():
        confdir.mkdir(parents=True, exist_ok=True)
        CertStore.create_store(confdir, "mitmproxy", 2048, organization=CA_ORGANIZATION, cn=CA_COMMON_NAME)


class SandgateMaster(DumpMaster, HookTableMaster):
    """mitmproxy's DumpMaster with a HookTable for its addons from the start: the same hooks in the same order,
    looked up once (dispatch.py)."""


def build_master(addons: Sequence[object], settings: MasterSettings) -> tuple[SandgateMaster, Ready]:
    """A master running `addons` (in order, after mitmproxy's own) with sandgate's options."""
    host, port = settings.listen
    ensure_ca(settings.confdir)
    opts = Options(listen_host=host, listen_port=port, confdir=str(settings.confdir))
    master = SandgateMaster(opts, with_termlog=False, with_dumper=False)
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
    drop_inert_addons(master)
    install_websocket_cap()                 # a WebSocket message is bounded in memory (layers.py)
    install_fast_message_check()            # mitmproxy's per-message type check, same verdicts, cheaper (messages.py)
    ready = Ready()
    master.addons.add(ready, CloseDisconnected(), *addons)
    return master, ready
