"""Wiring the credential broker into the egress proxy.

- Every live session's placeholders are known (store-backed, mirrored here) so a placeholder is recognised
  wherever it goes, whichever session it belongs to.
- requestheaders: placeholders in headers and URL are detected (for policy input, redaction and the
  exfiltration check); the `request` hook then scans the (capped) body, blocks any placeholder headed for a
  host its secret is not bound to — or belonging to another session — and swaps the real value in.
- Responses of requests that carried a secret are scrubbed (headers and streamed body) before the sandbox
  sees them. The real value is never logged or audited; audit records what the sandbox sent.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from mitmproxy import http

from broker.backends import SecretUnavailable
from broker.broker import Broker, SecretSpec, parse_secret_specs
from broker.inject import (check_destination, check_transport, find_placeholders, substitute_body,
                           substitute_headers, substitute_query)
from broker.scrub import Scrubber, StreamScrubber, replacements_for
from gateway.egress.hosts import normalise_host

if TYPE_CHECKING:
    from gateway.app import Gateway
    from gateway.egress.addon import EgressAddon, FlowState

log = logging.getLogger("sandgate.broker")

MASK = b"SANDGATE_BLOCKED_" * 8          # what a placeholder in a streamed body becomes (cut to its length)
MASK_PREFIX = MASK[:12]


def setup_broker(gw: "Gateway") -> None:
    raw = gw.cfg.raw
    gw.broker = Broker.from_config(raw["secrets"], raw["vault"], gw.cfg.data_dir, normalise_host=normalise_host,
                                   cache_ttl_s=float(raw["broker"]["cache_ttl_s"]))
    gw.broker_hooks = BrokerHooks(gw)


class BrokerHooks:
    def __init__(self, gw: "Gateway"):
        self.gw = gw
        self.owners: dict[str, tuple[str, str]] = {}      # placeholder -> (session id, secret name)
        self._mask_scrubber: Scrubber | None = None
        for row in gw.sessions.all():
            self.session_added(row)

    async def load_local_specs(self) -> None:
        """Secrets stored with `sandgate secrets put` become specs bound to their hosts."""
        local = self.gw.broker.resolver.backends.get("local")
        if local is None:
            return
        for item in await local.list():
            if item["name"] not in self.gw.broker.specs and item.get("hosts"):
                self.gw.broker.specs[item["name"]] = local_spec(item["name"], item["hosts"])

    # -- the live placeholder registry -------------------------------------------------------------
    def session_added(self, row: dict) -> None:
        if row.get("deleted_at"):
            return
        for name, ph in (row.get("placeholders") or {}).items():
            self.owners[ph] = (row["id"], name)
        self._mask_scrubber = None

    def session_removed(self, row: dict) -> None:
        for ph in (row.get("placeholders") or {}).values():
            self.owners.pop(ph, None)
        self._mask_scrubber = None

    def markers_for(self, session: dict) -> list[str]:
        return list((session.get("placeholders") or {}).values())

    def secrets_in(self, value: str) -> list[str]:
        """The names of the secrets whose placeholders `value` carries (any session, any encoding)."""
        return sorted({name for _owner, name in find_placeholders(value, self.owners)}) if self.owners else []

    # -- requestheaders --------------------------------------------------------------------------
    def scan_head(self, flow: http.HTTPFlow) -> set[tuple[str, str]]:
        if not self.owners:
            return set()
        text = "\n".join([flow.request.url] + [f"{k}: {v}" for k, v in flow.request.headers.items(multi=True)])
        return find_placeholders(text, self.owners)

    def exfiltration(self, addon: "EgressAddon", flow: http.HTTPFlow, st: "FlowState",
                     found: set[tuple[str, str]]) -> bool:
        """Block placeholders of other sessions, bound to other hosts, headed for cleartext or another port.
        True when blocked."""
        sid = st.session["id"]
        host = normalise_host(flow.request.host)      # the one normaliser: policy, injection and audit agree
        foreign = sorted(name for owner, name in found if owner != sid)
        specs = [self.gw.broker.specs[name] for owner, name in found
                 if owner == sid and name in self.gw.broker.specs]
        unbound = sorted(s.name for s in check_destination(host, specs))
        cleartext, wrong_port = check_transport(flow.request.scheme == "https", flow.request.port, specs)
        if foreign:
            code, reason, names = "secret.exfiltration", "a placeholder of another session was sent", []
        elif unbound:
            code, reason, names = "secret.exfiltration", f"secret {', '.join(unbound)} is not bound to {host}", unbound
        elif cleartext:
            names = [s.name for s in cleartext]
            code, reason = "secret.plaintext", f"secret {', '.join(names)} is sent only over TLS (https, wss)"
        elif wrong_port:
            names = [s.name for s in wrong_port]
            code, reason = "secret.port", f"secret {', '.join(names)} is not allowed to port {flow.request.port}"
        else:
            return False
        self.gw.metrics.exfiltration.inc()
        self.gw.audit.record("exfiltration", session=sid, step=self.gw.sessions.steps.get(sid), action="deny",
                             reasons=[reason], codes=[code], request_id=flow.id,
                             method=flow.request.method, host=host, path=st.path,
                             http_status=403, detail={"secrets": names, "foreign": bool(foreign)})
        addon.deny(flow, code, reason)
        return True

    # -- request ---------------------------------------------------------------------------------
    async def on_request(self, addon: "EgressAddon", flow: http.HTTPFlow, st: "FlowState") -> None:
        found = set(st.extra.get("head_secrets", set()))
        body = b"" if flow.request.stream else (flow.request.raw_content or b"")
        if body and self.owners:
            if len(body) > 64 * 1024:
                found |= await asyncio.to_thread(find_placeholders, body, self.owners)
            else:
                found |= find_placeholders(body, self.owners)
        if not found:
            return
        if self.exfiltration(addon, flow, st, found):
            return
        mine = {name: st.session["placeholders"][name] for owner, name in found if name in st.session["placeholders"]}
        try:
            bindings = await asyncio.wait_for(self.gw.broker.bindings(mine), self.gw.broker.lookup_timeout_s + 1)
        except (SecretUnavailable, asyncio.TimeoutError) as exc:
            code = getattr(exc, "code", "secret.backend_unavailable")
            log.warning("secret lookup failed for session %s: %s", st.session["id"], code)
            return addon.deny(flow, code, f"the secret store is unavailable for {', '.join(sorted(mine))}",
                              status=503)
        uses: list = []
        headers, used = substitute_headers(flow.request.headers.items(multi=True), bindings)
        uses += used
        query = flow.request.url.partition("?")[2]
        if query:
            new_query, used = substitute_query(query, bindings)
            if used:
                flow.request.path = flow.request.path.partition("?")[0] + "?" + new_query
            uses += used
        flow.request.headers = http.Headers([(k.encode(), v.encode()) for k, v in headers])
        if body and not flow.request.stream:
            new_body, used = substitute_body(body, bindings, flow.request.headers.get("content-type"))
            if used:
                flow.request.raw_content = new_body
                if "content-length" in flow.request.headers:
                    flow.request.headers["content-length"] = str(len(new_body))
            uses += used
        flow.request.headers.pop("accept-encoding", None)
        st.extra["scrub"] = replacements_for(bindings)
        st.extra.setdefault("audit", {})["secrets"] = sorted({f"{n}@{where}" for n, where in uses})
        for name in sorted({n for n, _ in uses}):
            self.gw.audit.record("secret.use", session=st.session["id"], action="inject", request_id=flow.id,
                                 method=flow.request.method, host=flow.request.host, path=st.path,
                                 detail={"secret": name, "where": sorted({w for n, w in uses if n == name})})

    def request_stream_filter(self, flow: http.HTTPFlow, st: "FlowState"):
        """A streamed (too large to hold) body may not carry a placeholder out: mask any it contains."""
        if not self.owners:
            return None
        if self._mask_scrubber is None:
            self._mask_scrubber = Scrubber({ph.encode(): MASK[:len(ph)] for ph in self.owners})
        scrubber = StreamScrubber(self._mask_scrubber)
        seen = [False]

        def scan(chunk: bytes) -> Any:
            out = scrubber(chunk)
            if not seen[0] and any(MASK_PREFIX in piece for piece in out):
                seen[0] = True
                self.gw.metrics.exfiltration.inc()
                self.gw.audit.record("exfiltration", session=st.session["id"], action="mask",
                                     reasons=["a placeholder in a body too large to inspect was blanked out"],
                                     codes=["secret.exfiltration"], request_id=flow.id, method=flow.request.method,
                                     host=flow.request.host, path=st.path)
            return out
        return scan

    # -- websocket frames ------------------------------------------------------------------------
    def message_carries_placeholder(self, content: bytes) -> bool:
        return bool(find_placeholders(content, self.owners))

    def scrub_message(self, content: bytes, replacements: dict) -> bytes:
        return Scrubber(replacements).sub(content)

    # -- response --------------------------------------------------------------------------------
    def response_filter(self, flow: http.HTTPFlow, st: "FlowState"):
        replacements = st.extra.get("scrub")
        if not replacements or flow.response is None:
            return None
        scrubber = Scrubber(replacements)
        for name, value in list(flow.response.headers.items(multi=True)):
            clean = scrubber.sub_text(value)
            if clean != value:
                flow.response.headers.set_all(name, [scrubber.sub_text(v) for v in
                                                     flow.response.headers.get_all(name)])
        encoding = flow.response.headers.get("content-encoding", "identity").lower()
        if encoding not in ("", "identity"):
            # Cannot scan a compressed stream: refuse rather than risk the value reaching the sandbox.
            st.extra["scrub_blocked"] = True
            return lambda chunk: b""
        if "content-length" in flow.response.headers:
            del flow.response.headers["content-length"]
            if flow.response.http_version == "HTTP/1.1":
                flow.response.headers["transfer-encoding"] = "chunked"
        return StreamScrubber(scrubber)


def local_spec(name: str, hosts: list[str]) -> SecretSpec:
    """A secret stored with `sandgate secrets put`: TLS only, any port."""
    return parse_secret_specs({name: {"source": f"local:{name}", "hosts": list(hosts)}}, normalise_host)[name]
