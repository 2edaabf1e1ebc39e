"""The egress addon: authenticate the connection, decide every CONNECT and request, vet the address.

Hooks decide and answer (403/407) in `http_connect` / `requestheaders`, before any upstream dial
(connection_strategy=lazy). The dial itself is guarded at the resolver (see resolver.py). Every security hook is
wrapped so that an exception denies instead of letting the flow through. Holding "ask" requests (hold.py) and
the credentials (injection.py) are addons of their own, registered after this one; they read the typed per-flow
state this addon attaches (flows.FlowState).
"""
from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
import weakref
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Mapping

from mitmproxy import connection, http
from mitmproxy.proxy import server_hooks
from wsproto.handshake import WEBSOCKET_VERSION

from broker.aws_ops import ServiceModels
from broker.broker import AWS_SECRET_PART
from broker.scrub import scrubber_for
from gateway.approvals.access import GRANTED, INTERNAL_HOST
from gateway.audit.log import AuditLog
from gateway.auth.tokens import AuthError, Principal, TokenVerifier
from gateway.config import EgressSettings
from gateway.net.addresses import AddressVerdict, parse_ip_literal, vet_addresses
from gateway.egress.aws import AwsCall, aws_facts, describe_call
from gateway.egress.credentials import parse_proxy_authorization, take_proxy_authorization
from gateway.egress.flows import ConnState, FlowState, attach, flow_state
from gateway.egress.guard import fail_closed
from gateway.egress.limits import HELD_BYTES_FULL, TOO_MANY_CONNECTIONS, TOO_MANY_HELD, Claim, ConnectionLimits, \
    HeldLimits
from gateway.net.hosts import normalise_host
from gateway.egress.recorder import FlowRecorder
from gateway.egress.resolver import UPSTREAM_DIAL, DialGuard, Resolver, VettedResolver
from gateway.egress.responses import auth_required, denial
from gateway.egress.screen import SecretScreen
from gateway.egress.targets import TargetArgs, TargetVerdict, check_target
from gateway.runtime.metrics import Metrics
from gateway.packages.firewall import PackageFirewall
from gateway.policy.base import PolicyEngine
from gateway.gates.egress import EgressGate, EgressRequest, GrantSource
from gateway.sessions.registry import SessionRegistry

log = logging.getLogger("sandgate.egress")

STREAM_ABOVE_BYTES = 256 * 1024      # responses larger (or of unknown size) stream through
VETTED_FOR_S = 30.0                  # a connection reuses an address verdict this long


# (session id, method, path, query, body) -> (status, JSON document)
InsideAnswer = Callable[[str, str, str, Mapping[str, str], bytes], Awaitable[tuple[int, dict]]]


@dataclass(frozen=True)
class EgressDeps:
    """What the egress addon needs, each typed: nothing is looked up later."""

    settings: EgressSettings
    tokens: TokenVerifier
    sessions: SessionRegistry
    engine: PolicyEngine
    audit: AuditLog
    metrics: Metrics
    resolver: Resolver
    recorder: FlowRecorder
    screen: SecretScreen
    packages: PackageFirewall                # package downloads' facts (input.request.package)
    own_listeners: list[tuple[str, int]]     # sandgate's own listening addresses (always refused), once bound
    held: HeldLimits                         # held requests per session, bytes held in memory (limits.py)
    connections: ConnectionLimits            # client connections per session
    aws_models: ServiceModels = field(default_factory=ServiceModels)   # botocore's models: AWS operations
    grants: GrantSource | None = None        # a session's live access grants (ApprovalQueue.grants_for)
    inside: InsideAnswer | None = None       # what sandgate.internal answers (approvals/inside.py); None: 404


class EgressAddon:
    def __init__(self, deps: EgressDeps):
        self.deps = deps
        self.gate = EgressGate(settings=deps.settings, engine=deps.engine, sessions=deps.sessions,
                               packages=deps.packages, grants=deps.grants)
        self.conns: "weakref.WeakKeyDictionary[connection.Client, ConnState]" = weakref.WeakKeyDictionary()

    # -- helpers ---------------------------------------------------------------------------------
    def deny(self, flow: http.HTTPFlow, code: str, reason: str, status: int = 403) -> None:
        self.deps.recorder.deny(flow, code, reason, status=status)

    def authenticate(self, flow: http.HTTPFlow) -> tuple[Principal | None, str]:
        """The session of this request. Identity is per client connection: set by the first request's (or the
        CONNECT's) Proxy-Authorization; inside a tunnel no header can change it. Expiry and revocation are
        checked on every request, also for the connection's cached principal."""
        tokens = self.deps.tokens
        headers = flow.request.headers
        kept, values = take_proxy_authorization(headers.fields)
        if values:
            headers.fields = kept           # never forwarded
        state = self.conns.get(flow.client_conn)
        in_tunnel = state is not None and state.tunnel is not None
        if values and not in_tunnel and state is not None and values[0] == state.credential:
            # The very credentials this connection's principal was verified from (a keep-alive client sends them
            # on every request): the same token, so the same principal TokenVerifier.verify would return from
            # its cache. Expiry and revocation are checked as verify checks them.
            try:
                tokens.check(state.principal)
            except AuthError as exc:
                return None, f"session token refused: {exc}"
            return state.principal, ""
        token = parse_proxy_authorization(values[0]) if values and not in_tunnel else None
        if token is None:
            if state is None:
                return None, "proxy authentication required"
            try:
                tokens.check(state.principal)
            except AuthError as exc:
                self.conns.pop(flow.client_conn, None)
                return None, f"session token refused: {exc}"
            return state.principal, ""
        try:
            principal = tokens.verify(token)
        except AuthError as exc:
            return None, f"session token refused: {exc}"
        if principal.role != "session":
            return None, "not a session token"
        if state is None or state.principal.session_id != principal.session_id:
            # another session: nothing carried over
            self.conns[flow.client_conn] = ConnState(principal, credential=values[0])
        else:
            state.principal = principal         # the same session (a fresh token): keep what was vetted
            state.credential = values[0]
        return principal, ""

    def adopt(self, client: connection.Client, principal: Principal) -> None:
        """A transparent connection's session, known by its source address (transparent.py); nothing the client
        sends changes it. Never called for a regular-mode connection, which authenticates with credentials."""
        self.conns[client] = ConnState(principal)

    def granted_only(self, client: connection.Client) -> bool:
        """Whether only an access grant opened this connection's tunnel (layers.py then intercepts it)."""
        state = self.conns.get(client)
        return state is not None and state.granted_only

    def tunnel_of(self, client: connection.Client) -> tuple[str, int] | None:
        """The decided destination of a client connection (CONNECT target or transparent destination)."""
        state = self.conns.get(client)
        return state.tunnel if state is not None else None

    def vetted_now(self, client: connection.Client, target: tuple[str, int]) -> bool:
        """Whether this connection's decision vetted `target`'s addresses and allowed them (and the verdict is
        still fresh): a dial to it may follow before any request (layers.LayerGate.tls_clienthello)."""
        state = self.conns.get(client)
        entry = state.vetted.get(target) if state is not None else None
        return entry is not None and entry[0].allowed and entry[1] > time.monotonic()

    def connection_valid(self, client: connection.Client) -> bool:
        """Whether the connection's session is still live and its token neither expired nor revoked."""
        state = self.conns.get(client)
        if state is None:
            return False
        try:
            self.deps.tokens.check(state.principal)
        except AuthError:
            return False
        return self.deps.sessions.live_now(state.principal.session_id or "") is not None

    def session_of(self, client: connection.Client) -> str | None:
        """The session authenticated on a client connection (None before its first request)."""
        state = self.conns.get(client)
        return state.principal.session_id if state is not None else None

    def vet(self, addresses: list[str], port: int) -> AddressVerdict:
        return vet_addresses(addresses, port, private_allow=self.deps.settings.private_allow,
                             own_listeners=self.deps.own_listeners)

    async def check_address(self, flow: http.HTTPFlow, host: str, port: int) -> AddressVerdict:
        state = self.conns.get(flow.client_conn)
        key = (host, port)
        if state is not None and key in state.vetted and state.vetted[key][1] > time.monotonic():
            return state.vetted[key][0]
        literal = parse_ip_literal(host)
        if literal is not None:
            verdict = self.vet([str(literal)], port)
        else:
            try:
                addresses = await self.deps.resolver.resolve(host, port)
            except OSError:
                addresses = []
            verdict = self.vet(addresses, port)
            if not addresses:
                verdict = AddressVerdict(False, "", "address.unresolvable", f"cannot resolve {host}", ())
        if state is not None:
            state.vetted[key] = (verdict, time.monotonic() + VETTED_FOR_S)
        return verdict

    # -- the decision ----------------------------------------------------------------------------
    async def decide(self, flow: http.HTTPFlow) -> None:
        started = time.perf_counter()
        deps = self.deps
        if not deps.audit.accepting:
            # A gateway that cannot record does not decide (the refusal itself is counted, not audited).
            flow.response = denial("audit.unavailable", "sandgate cannot record decisions right now; try again",
                                   flow.id, status=503)
            deps.metrics.audit_refused.labels("egress").inc()
            return
        principal, why = self.authenticate(flow)
        if principal is None:
            flow.response = auth_required(flow.id, why)
            deps.metrics.decision("egress", "auth")
            return
        session = await deps.sessions.live(principal.session_id)
        if session is None:
            self.conns.pop(flow.client_conn, None)
            flow.response = auth_required(flow.id, "session ended or expired")
            deps.metrics.decision("egress", "auth")
            return
        st = FlowState(session=session, started=started, path=flow.request.path)
        attach(flow, st)
        if not deps.connections.open(flow.client_conn.id, st.session_id):
            self.conns.pop(flow.client_conn, None)
            self.deny(flow, TOO_MANY_CONNECTIONS, f"this session already has {deps.connections.max_connections} "
                      "connections open to the proxy (sessions.max_connections)", status=429)
            flow.response.headers.set_all("Connection", ["close"])
            return
        req = flow.request
        is_connect = req.method == "CONNECT"
        state = self.conns.get(flow.client_conn)
        tunnel = state.tunnel if state is not None else None
        try:
            host = normalise_host(req.host)
        except ValueError:
            return self.deny(flow, "egress.bad_host", "the destination host is not valid")
        if is_connect and tunnel is not None:
            return self.deny(flow, "egress.nested_connect", "a CONNECT inside a tunnel is not allowed")
        if not is_connect:
            bad = check_target(TargetArgs(destination=tunnel or (host, req.port), in_tunnel=tunnel is not None,
                                          authority=req.authority, host_headers=req.headers.get_all("host")))
            if tunnel is not None and (host, req.port) != tunnel:
                bad = TargetVerdict("egress.authority_mismatch", "the request left its tunnel's destination")
            if bad is not None:
                return self.deny(flow, bad.code, bad.reason)
        sni = flow.client_conn.sni
        if not is_connect and sni and _norm_or_empty(sni) != host:
            return self.deny(flow, "egress.sni_mismatch", "the TLS server name does not match the destination")
        if host == INTERNAL_HOST:
            return self.internal(flow, st, is_connect, state)
        found = deps.screen.scan_head(flow)
        st.head_secrets = frozenset(found)
        if found and deps.screen.refuse(flow, st, found):
            return
        literal = parse_ip_literal(host)
        ip, ip_class = "", ""
        if literal is not None:
            lv = self.vet([str(literal)], req.port)
            ip, ip_class = str(literal), lv.ip_class
        if req.host != host:
            req.host = host             # dial the name the policy judges (no trailing dot, punycode, canonical IP)
        sid, own = st.session_id, st.placeholders
        aws = None if is_connect else await self.aws_call(flow, sid, own, found)
        if aws is not None and aws.needs_body:
            size = req.headers.get("content-length", "")
            if not size.isdigit() or int(size) > deps.settings.inspect_max_bytes:
                return self.deny(flow, "aws.body_too_large",
                                 "this AWS call names its operation in a body too large to read")
            st.deferred = functools.partial(self.judge, flow, st, host, ip, ip_class, found)
            return                                  # decided in `request`, with the body that names the operation
        await self.judge(flow, st, host, ip, ip_class, found, aws)

    async def aws_call(self, flow: http.HTTPFlow, sid: str, own: dict, found: set) -> AwsCall | None:
        """The AWS operation a request signed with the session's placeholder key calls (None for any other)."""
        names = [n for o, n in found if o == sid and f"{n}{AWS_SECRET_PART}" in own]
        if not names:
            return None
        models = self.deps.aws_models
        facts = aws_facts(flow, own[names[0]])
        if facts is None:
            return None
        if not models.loaded(facts.service):
            await asyncio.to_thread(models.load, facts.service)
        return describe_call(models.index(facts.service), facts, flow, body=None)

    async def judge(self, flow: http.HTTPFlow, st: FlowState, host: str, ip: str, ip_class: str, found: set,
                    aws: AwsCall | None) -> None:
        """The egress gate's decision on a request (gateway/gates/egress.py), applied to the flow."""
        deps = self.deps
        req = flow.request
        is_connect = req.method == "CONNECT"
        state = self.conns.get(flow.client_conn)
        tunnel = state.tunnel if state is not None else None
        sid, own = st.session_id, st.placeholders
        st.aws = aws.facts() if aws is not None and not aws.ambiguous else None
        request = EgressRequest(
            session=st.session, method=req.method, host=host, port=req.port,
            scheme="" if is_connect else req.scheme, path="" if is_connect else req.path.split("?", 1)[0],
            query="" if is_connect else url_query(req), headers=tuple(req.headers.items(multi=True)),
            tunnel=tunnel is not None and not is_connect, ip=ip, ip_class=ip_class,
            secrets=tuple(name for owner, name in found if owner == sid),
            markers=tuple(own[n] for o, n in found if o == sid and n in own),
            aws=st.aws, aws_ambiguous=aws is not None and aws.ambiguous, request_id=flow.id)
        outcome = await self.gate.decide(request, functools.partial(self.check_address, flow))
        st.decision = outcome.decision
        if outcome.action == "deny":
            return self.deny(flow, outcome.code, outcome.reason)
        if outcome.action == "ask":
            st.ask = True
            return
        deps.metrics.decision("egress", "allow")
        if is_connect:
            if state is not None:
                state.tunnel = (host, req.port)
                # a grant covers methods under a path prefix: only requests decided one by one honour it, so a
                # tunnel it alone opened is never relayed unread (egress.raw_tcp, egress.passthrough)
                state.granted_only = set(outcome.decision.codes) == {GRANTED}
            st.audited = True
            deps.recorder.audit(flow, st, action="allow", codes=list(outcome.decision.codes),
                                reasons=list(outcome.decision.reasons), status=200)
            return
        if st.deferred is None:
            self.prepare_request_body(flow, st)

    def internal(self, flow: http.HTTPFlow, st: FlowState, is_connect: bool, state: ConnState | None) -> None:
        """sandgate.internal: answered here (in `request`, once the body is read), never resolved, never dialled.
        A CONNECT to it opens a tunnel the proxy terminates with the session's CA."""
        if is_connect:
            if state is not None:
                state.tunnel = (INTERNAL_HOST, flow.request.port)
            st.audited = True
            self.deps.recorder.audit(flow, st, action="allow", codes=["sandgate.internal"],
                                     reasons=["sandgate answers sandgate.internal itself"], status=200)
            return
        if self.body_too_large(flow):
            return self.deny(flow, "sandgate.internal_body", "the body is too large for sandgate.internal")
        st.internal = True

    async def answer_internal(self, flow: http.HTTPFlow, st: FlowState) -> None:
        req = flow.request
        if self.deps.inside is None:
            status, doc = 404, {"error": "not_found", "detail": "sandgate.internal serves nothing here"}
        else:
            status, doc = await self.deps.inside(st.session_id, req.method, req.path, dict(req.query.items()),
                                                 req.raw_content or b"")
        flow.response = http.Response.make(status, json.dumps(doc).encode(), {
            "Content-Type": "application/json", "Cache-Control": "no-store", "X-Sandgate-Request-Id": flow.id})

    def prepare_request_body(self, flow: http.HTTPFlow, st: FlowState) -> None:
        """Stream large or unsized bodies through (counting bytes); small ones are buffered for inspection."""
        size = flow.request.headers.get("content-length")
        if size is None and not unsized_body(flow.request):
            return
        if size is not None and size.isdigit() and int(size) <= self.deps.settings.inspect_max_bytes:
            return
        flow.request.stream = st.count_out

    # -- hooks -----------------------------------------------------------------------------------
    @fail_closed
    async def http_connect(self, flow: http.HTTPFlow) -> None:
        await self.decide(flow)

    @fail_closed
    async def requestheaders(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None:
            return
        await self.decide(flow)
        st = flow_state(flow)
        if flow.response is None and st is not None and st.ask and self.body_too_large(flow):
            self.deny(flow, "approval.body_too_large", "approval required, but the body is too large to hold")
        if flow.response is None and st is not None:
            self.admit(flow, st)
        self.refuse_large_body(flow)

    def admit(self, flow: http.HTTPFlow, st: FlowState) -> None:
        """Before the body is read: a held request takes one of its session's `sessions.max_held` slots, and a
        body the proxy will buffer (held, or inspected) takes its declared size of `egress.max_held_bytes`.
        Beyond either, the request is refused (429, 503) and its body never buffered for long."""
        size = flow.request.headers.get("content-length", "")
        nbytes = int(size) if size.isdigit() and not flow.request.stream else 0
        if not st.ask and not nbytes:
            return
        limits = self.deps.held
        claim = limits.admit(st.session_id if st.ask else None, nbytes)
        if claim == TOO_MANY_HELD:
            return self.deny(flow, TOO_MANY_HELD, f"this session already has {limits.max_held} requests waiting "
                             "for approval (sessions.max_held)", status=429)
        if claim == HELD_BYTES_FULL:
            return self.deny(flow, HELD_BYTES_FULL, "sandgate holds as many request bodies in memory as it may "
                             "(egress.max_held_bytes); try again later", status=503)
        assert isinstance(claim, Claim)
        st.claim = claim
        weakref.finalize(flow, limits.release, claim)     # a flow that ends without a hook still gives it back

    def release(self, flow: http.HTTPFlow) -> None:
        st = flow_state(flow)
        if st is not None:
            self.deps.held.release(st.claim)
            self.deps.held.release(st.response_claim)

    def client_disconnected(self, client: connection.Client) -> None:
        self.deps.connections.close(client.id)

    def body_too_large(self, flow: http.HTTPFlow) -> bool:
        """A body of unknown size, or declared larger than inspect_max_bytes."""
        size = flow.request.headers.get("content-length")
        if size is not None:
            return not size.isdigit() or int(size) > self.deps.settings.inspect_max_bytes
        return unsized_body(flow.request)

    def refuse_large_body(self, flow: http.HTTPFlow) -> None:
        """mitmproxy reads a refused request's whole body into memory before it sends our answer. For a body
        that is large or of unknown size, close the connection instead (the denial is audited): a sandbox must
        not be able to exhaust the gateway's memory with uploads to denied hosts."""
        if flow.response is not None and flow.response.status_code in (403, 407, 503) and self.body_too_large(flow):
            st = flow_state(flow)
            if st is not None:
                st.killed = True
            flow.kill()

    @fail_closed
    async def request(self, flow: http.HTTPFlow) -> None:
        st = flow_state(flow)
        if st is None or flow.response is not None:
            return
        if st.deferred is not None:                 # an AWS call that names its operation in its (held) body
            facts = aws_facts(flow, st.placeholders.get(
                next(n for o, n in st.head_secrets if o == st.session_id and
                     f"{n}{AWS_SECRET_PART}" in st.placeholders), ""))
            aws = describe_call(self.deps.aws_models.index(facts.service), facts, flow,
                                body=flow.request.raw_content or b"") if facts is not None else None
            await st.deferred(aws)
            if flow.response is not None:
                return
            if st.ask:                              # now held: it takes a held slot like any held request
                self.release(flow)
                st.claim = None
                self.admit(flow, st)
                if flow.response is not None:
                    return
        if not flow.request.stream:
            st.bytes_out = len(flow.request.raw_content or b"")
        if st.internal:
            await self.answer_internal(flow, st)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        st = flow_state(flow)
        if st is None or flow.response is None or st.denied:
            return
        if flow.response.status_code == 101:
            return          # decided in `response` (a switch to anything but WebSocket is refused)
        size = flow.response.headers.get("content-length", "")
        if size.isdigit() and int(size) <= STREAM_ABOVE_BYTES:
            # small: buffered by mitmproxy (counted in `response`, unless scrubbed: injection.py), within
            # egress.max_held_bytes; when that is in use it streams through instead (never refused)
            claim = self.deps.held.admit(None, int(size))
            if isinstance(claim, Claim):
                st.response_claim = claim
                weakref.finalize(flow, self.deps.held.release, claim)
                return
        flow.response.stream = st.count_in

    def response(self, flow: http.HTTPFlow) -> None:
        self.release(flow)
        st = flow_state(flow)
        if st is None or st.audited or flow.response is None:
            return
        if flow.response.status_code == 101 and not is_websocket_switch(flow.request, flow.response):
            # After a 101 the connection would carry bytes no rule decides: refuse, and close it.
            self.deny(flow, "egress.upgrade_refused", "switching to a protocol other than WebSocket is not allowed")
            flow.response.headers.set_all("Connection", ["close"])
            return
        st.audited = True
        d = st.decision
        if not flow.response.stream:
            st.bytes_in = len(flow.response.raw_content or b"")
        self.deps.metrics.latency.observe(time.perf_counter() - st.started)
        self.deps.recorder.audit(flow, st, action=d.action if d else "allow", codes=list(d.codes) if d else [],
                                 reasons=list(d.reasons) if d else [], status=flow.response.status_code,
                                 detail=st.audit_detail())

    def error(self, flow: http.HTTPFlow) -> None:
        self.release(flow)
        st = flow_state(flow)
        if st is None or st.audited or st.killed:
            return
        st.audited = True
        d = st.decision
        message = flow.error.msg if flow.error else ""
        if st.scrub:
            # The text may quote the upstream (a malformed status line, say): the audit row gets it scrubbed. The
            # client's error page never quotes it (layers.GuardedHttpLayer).
            message = scrubber_for(st.scrub).sub_text(message)
        self.deps.recorder.audit(flow, st, action=d.action if d else "error", codes=list(d.codes) if d else [],
                                 reasons=list(d.reasons) if d else [], status=None,
                                 detail={"error": message[:200], **st.audit_detail()})

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        """WebSocket frames after an allowed upgrade pass only while the session lives (injection.py screens
        their content)."""
        # mitmproxy keeps every message of the connection in this list; every addon reads only the newest (this
        # hook is the first of those that read it): the earlier ones go, or a long WebSocket grows without end.
        if flow.websocket is not None:
            del flow.websocket.messages[:-1]
        st = flow_state(flow)
        if st is None or flow.websocket is None or not flow.websocket.messages:
            return
        try:
            if not self.connection_valid(flow.client_conn):
                # The session ended or its token was revoked: no frame passes any more (mitmproxy cannot kill
                # a WebSocket flow in transit, so every further frame is dropped).
                flow.websocket.messages[-1].drop()
        except Exception:  # noqa: BLE001 - fail closed: drop the frame
            log.exception("internal_error in websocket_message")
            flow.websocket.messages[-1].drop()

    async def server_connect(self, data: server_hooks.ServerConnectionHookData) -> None:
        try:
            address = data.server.address
            if address is None:
                return
            proxy = self.deps.settings.upstream_proxy
            if proxy is not None and (normalise_host(str(address[0])), int(address[1])) == proxy.address:
                # the configured upstream proxy: an operator endpoint, dialled as configured (upstream.py)
                UPSTREAM_DIAL.set(None)
                return
            literal = parse_ip_literal(str(address[0]))
            if literal is not None:
                verdict = self.vet([str(literal)], int(address[1]))
                if not verdict.allowed:
                    data.server.error = f"sandgate refused the destination: {verdict.code}"
                    return
            state = self.conns.get(data.client)
            resolver = self.deps.resolver if state is None else VettedResolver(state.vetted, self.deps.resolver)
            UPSTREAM_DIAL.set(DialGuard(vet=self.vet, resolver=resolver))
        except Exception:  # noqa: BLE001
            log.exception("internal_error in server_connect")
            data.server.error = "sandgate internal error"


def is_websocket_switch(request: http.Request, response: http.Response) -> bool:
    """A 101 that mitmproxy turns into its WebSocket layer (frames parsed, each decided): the same test as
    mitmproxy's own, so nothing else ever becomes a raw pipe."""
    return (response.status_code == 101 and response.headers.get("upgrade", "").lower() == "websocket"
            and request.headers.get("sec-websocket-version", "").encode() == WEBSOCKET_VERSION)


def url_query(request: http.Request) -> str:
    """`request.url.partition("?")[2]` (the text after the URL's first "?") without building the URL: the URL is
    scheme://host[:port] + path (the path "*" left out), so when neither scheme nor host holds a "?" the first
    one is the path's. Not for CONNECT (authority form)."""
    if "?" in request.scheme or "?" in request.host:
        return request.url.partition("?")[2]
    path = request.path
    return "" if path == "*" else path.partition("?")[2]


def unsized_body(request: http.Request) -> bool:
    """A body is coming whose size is not declared: chunked HTTP/1, or an HTTP/2-3 upload without
    content-length (their frames carry the body; GET-like methods are taken to have none)."""
    if "chunked" in request.headers.get("transfer-encoding", "").lower():
        return True
    return (request.http_version.startswith(("HTTP/2", "HTTP/3")) and "content-length" not in request.headers
            and request.method in ("POST", "PUT", "PATCH"))


def _norm_or_empty(host: str) -> str:
    try:
        return normalise_host(host)
    except ValueError:
        return ""
