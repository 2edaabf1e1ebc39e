"""Typed state the egress addons keep per client connection and per flow (never dicts with string keys)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Awaitable, Callable, Iterable, Mapping

from mitmproxy import http

from gateway.auth.tokens import Principal
from gateway.egress.limits import Claim
from gateway.net.addresses import AddressVerdict
from gateway.policy.decision import Decision
from gateway.store.records import Session

StreamFilter = Callable[[bytes], "bytes | Iterable[bytes]"]
_KEY = "sandgate"


@dataclass
class ConnState:
    """One client connection: who it is (set by its first request's proxy credentials) and what was vetted."""

    principal: Principal
    credential: str | None = None                  # the Proxy-Authorization value `principal` was verified from
    vetted: dict[tuple[str, int], tuple[AddressVerdict, float]] = field(default_factory=dict)  # -> (verdict, until)
    tunnel: tuple[str, int] | None = None          # the CONNECT target, once a tunnel is open on this connection
    granted_only: bool = False                     # an access grant alone opened it: intercepted, never relayed


@dataclass
class FlowState:
    """One request of an authenticated session, from its decision to its audit row."""

    session: Session                               # the live session, as the registry had it when the flow began
    path: str = ""                                 # as the sandbox sent it (audit never sees injected values)
    decision: Decision | None = None
    started: float = 0.0
    bytes_out: int = 0
    bytes_in: int = 0
    audited: bool = False                          # its audit row is written (exactly one per flow)
    denied: bool = False                           # sandgate answered it (403/407/503)
    killed: bool = False                           # sandgate closed the connection instead of answering
    head_secrets: frozenset[tuple[str, str]] = frozenset()   # (owner session, secret) in its URL and headers
    ask: bool = False                              # the policy asked: held for approval in `request`
    approval_id: str | None = None                 # the approval it was held for
    approval_status: str | None = None             # how that approval ended
    approved_by: str | None = None
    secrets_used: tuple[str, ...] | None = None    # "name@where" for each injected secret
    injected: bool = False                         # values swapped in (at requestheaders for a streamed body)
    scrub: dict[bytes, bytes] | None = None        # real value -> placeholder, for the response
    scrub_blocked: bool = False                    # a compressed response could not be scanned: withheld
    withheld: bytes = b""                          # the 502 body sent instead
    claim: Claim | None = None                     # its held slot and buffered bytes (limits.py), given back once
    response_claim: Claim | None = None            # the bytes of a small response buffered whole
    aws: dict | None = None                        # an AWS call's {"service", "region", "operation", "resource"}
    deferred: Callable[..., Awaitable[None]] | None = None   # decided in `request` (an AWS operation in the body)
    internal: bool = False                         # to sandgate.internal: answered by the proxy (`request`)

    @property
    def session_id(self) -> str:
        return self.session.id

    @property
    def placeholders(self) -> Mapping[str, str]:
        """The session's secret name -> placeholder value (what the sandbox holds instead of each secret)."""
        return self.session.placeholders

    def audit_detail(self) -> dict:
        """What its audit row adds about approvals and secrets."""
        detail = {"approval_id": self.approval_id, "approval_status": self.approval_status,
                  "approved_by": self.approved_by,
                  "secrets": list(self.secrets_used) if self.secrets_used is not None else None}
        return {k: v for k, v in detail.items() if v is not None}

    def count_out(self, chunk: bytes) -> bytes:
        self.bytes_out += len(chunk)
        return chunk

    def count_in(self, chunk: bytes) -> bytes:
        self.bytes_in += len(chunk)
        return chunk


def flow_state(flow: http.HTTPFlow) -> FlowState | None:
    state = flow.metadata.get(_KEY)
    return state if isinstance(state, FlowState) else None


def attach(flow: http.HTTPFlow, state: FlowState) -> None:
    flow.metadata[_KEY] = state


def chain(first: StreamFilter, then: StreamFilter) -> StreamFilter:
    """A stream filter that runs `then` on what `first` returns (bytes or a list of pieces)."""
    def run(chunk: bytes) -> bytes | Iterable[bytes]:
        out = first(chunk)
        if isinstance(out, (bytes, bytearray)):
            return then(bytes(out))
        pieces: list[bytes] = []
        for piece in [p for p in out if p] + ([b""] if not chunk else []):     # b"": the end, passed on
            result = then(piece)
            pieces.extend([result] if isinstance(result, (bytes, bytearray)) else result)
        return [p for p in pieces if p]
    return run
