"""Configuration: a TOML file, `SANDGATE_<SECTION>__<KEY>` environment overrides, validated at load.

Every key is optional. A bad value refuses to start (ValueError) rather than run degraded. `load_config` turns
the merged document into typed, frozen section settings (`EgressSettings`, `ApprovalSettings`, ...): services
take the section they need; nothing outside this module reads the raw document.
"""
from __future__ import annotations

import copy
import difflib
import ipaddress
import json
import math
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit
from types import MappingProxyType
from typing import Any, Mapping

from broker.sources import parse_source
from broker.specs import SecretSpec, parse_secret_specs
from gateway.net.addresses import IPNetwork, parse_networks
from gateway.net.hosts import AllowEntry, normalise_host, parse_allow_entry, split_hostport
from gateway.net.upstream_proxy import UpstreamProxy, parse_upstream_proxy


@dataclass(frozen=True)
class Key:
    """One configuration key: its default, what it means (docs/reference.md is generated from these), and its
    type, inferred from the default unless given: `bool`, `int`, `number` (int or float), `str`, `list`, `map`."""

    default: Any
    meaning: str
    kind: str = ""

    @property
    def type(self) -> str:
        if self.kind:
            return self.kind
        for kind, cls in (("bool", bool), ("int", int), ("number", float), ("str", str), ("list", list),
                          ("map", dict)):
            if isinstance(self.default, cls):
                return kind
        raise TypeError(f"no type for {self.default!r}")


# The configuration's schema: sections (dicts) of keys. `load_config` refuses a key or section not listed here,
# and a value not of its key's type. Tables whose keys the user names (`[secrets.NAME]`, `[databases.NAME]`,
# `egress.resolve`) are `map` keys, validated by their own parsers.
SCHEMA: dict[str, Any] = {
    "data_dir": Key("", "where sandgate keeps its state (store, CA, keys, tokens); `--data-dir` and "
                        "`SANDGATE_DATA_DIR` win; empty: `./.sandgate`"),
    "proxy": {
        "listen": Key("127.0.0.1:8080", "host:port of the HTTP(S) proxy sandboxes use"),
        "advertise_url": Key("", "host:port sandboxes reach the proxy at (in `proxy_url`); empty: the listener"),
        "transparent_listen": Key("", "host:port of the transparent listener (`run --isolate`, sandbox recipes); "
                                      "off unless `dns_listen` is set too"),
        "dns_listen": Key("", "host:port (UDP) of the filtering resolver for transparent capture"),
        "transparent_sources": Key(["10.200.0.0/16"], "networks a session's `source` address may be in"),
        "postgres_listen": Key("", "host:port of the PostgreSQL gateway; off while empty (then no "
                                   "`[databases.NAME]` may be configured)"),
        "postgres_advertise": Key("", "host:port sandboxes reach the PostgreSQL gateway at; empty: the listener"),
    },
    "api": {
        "listen": Key("127.0.0.1:8700", "host:port of the API and the approval page"),
        "harness_token_file": Key("", "a file holding the harness token to use instead of writing "
                                      "`DATA_DIR/harness.token` (mint it with `sandgate token --role harness`): "
                                      "`serve` refuses to start unless it holds a harness token this data dir's "
                                      "key signed, not expired; `run` and `mcp` read their token from it"),
        "trusted_proxies": Key([], "CIDR networks of TLS-terminating proxies (an ingress) whose "
                                   "`X-Forwarded-Proto` is believed (the page's cookie is then `Secure`); "
                                   "from anyone else the header is ignored"),
    },
    "egress": {
        "private_allow": Key([], "CIDR networks sessions may reach although private (loopback, RFC 1918, ...)"),
        "upstream_ca": Key("", "a CA bundle trusted for upstreams, added to the public roots"),
        "passthrough": Key([], "hosts (`host` or `host:port`) whose TLS is relayed without interception"),
        "raw_tcp": Key([], "`host:port` tunnels allowed to carry non-HTTP bytes"),
        "inspect_max_bytes": Key(1048576, "largest request body read for placeholders, secrets and approvals"),
        "hold_timeout_s": Key(300, "how long a request held for approval waits", "number"),
        "drain_s": Key(0, "on SIGTERM, how long requests already held for approval may still be decided "
                          "(new connections are refused meanwhile); then they are answered 503 "
                          "`sandgate.stopping` and their approvals stay pending", "number"),
        "resolve": Key({}, "a static name -> [addresses] map (like curl --resolve), tried before DNS"),
        "package_registries": Key([], "extra package registries: a list of `{host, ecosystem}` "
                                      "(`PyPI` or `npm`) tables"),
        "package_max_bytes": Key(33554432, "largest package index document rewritten (larger ones pass "
                                           "unmodified)"),
        "upstream_proxy": Key("", "`http://HOST:PORT` or `https://HOST:PORT`: every allowed request leaves through "
                                  "it; empty: direct"),
        "upstream_proxy_user": Key("", "a secret source for Basic auth to the proxy; with `upstream_proxy_password`"),
        "upstream_proxy_password": Key("", "a secret source; with `upstream_proxy_user`"),
        "upstream_proxy_resolve": Key("local", "`local`: sandgate resolves and vets, and hands the proxy the vetted "
                                               "address; `proxy`: hands it the name (no address check for names)"),
        "upstream_proxy_bypass": Key([], "NO_PROXY-style exceptions dialled direct: `corp.example`, `10.0.0.0/8`, "
                                         "`192.0.2.7:8080`, `*`"),
        "max_held_bytes": Key(268435456, "request bodies buffered in memory for holds and inspection, all sessions "
                                         "together; beyond: 503 `egress.held_bytes_full`"),
    },
    "sessions": {
        "max_held": Key(8, "egress requests of one session held for approval at once; beyond: 429 "
                           "`egress.too_many_held`"),
        "max_pending_approvals": Key(32, "pending approvals of one session; beyond, an ask is a deny "
                                         "(`approvals.too_many`)"),
        "max_connections": Key(64, "proxy client connections of one session (per process); beyond: 429 "
                                   "`egress.too_many_connections`"),
        "max_lifetime_s": Key(0, "how long a persistent session may live from its creation (0: no limit)"),
        "ephemeral_max_lifetime_s": Key(86400, "the same for ephemeral sessions"),
    },
    # per workload; 0 = none. Past one, the default policies ask for every action (budget.exceeded)
    "budgets": {workload: {
        "requests": Key(0, f"egress requests of a {workload} session (0: no budget)"),
        "bytes_out": Key(0, "request body bytes sent upstream"),
        "bytes_in": Key(0, "response body bytes received"),
        "toolcalls": Key(0, "tool calls decided"),
        "denials_per_10m": Key(0, "more denials than this within ten minutes freeze the session"),
    } for workload in ("persistent", "ephemeral")},
    "approvals": {
        "ttl_s": Key(3600, "how long a pending approval stays open", "number"),
        "quorum": Key(1, "approvals (by distinct approvers) an action needs"),
        "reuse_window_s": Key(600, "how long an approval covers the same action again in the same session",
                              "number"),
        "max_grant_ttl_s": Key(86400, "the longest an access grant may last (a request's `ttl_s` beyond: 400)",
                               "number"),
    },
    "audit": {
        "max_pending": Key(100000, "audit rows that may wait to be written; past it new requests get 503"),
        "checkpoint_rows": Key(10000, "a signed checkpoint once this many rows were chained since the last"),
        "checkpoint_interval_s": Key(60.0, "... or this long after the last one (when rows were chained since)"),
    },
    "policy": {
        "dir": Key("", "the policy directory; empty: the policies shipped with sandgate"),
        "engine": Key("embedded", "`embedded` (regorus, in process) or `opa` (an OPA server at `opa_url`)"),
        "opa_url": Key("http://127.0.0.1:8181", "the OPA server (engine `opa`), an http(s) URL without a path"),
        "opa_push": Key(True, "push `policy.dir` to the OPA server (false: it loads its own bundles)"),
        "timeout_s": Key(2.0, "longest a decision may take; past it the request is denied", "number"),
        "workers": Key(2, "policy evaluation workers (embedded engine)"),
        "isolation": Key("process", "the embedded engine's workers: `process` or `thread`"),
        "shadow_dir": Key("", "a candidate policy evaluated beside the live one as a dry run"),
        "decision_log": Key(True, "log every decision"),
    },
    "store": {
        "url": Key("", "the store: `sqlite:///PATH` or `postgresql://...`; empty: `DATA_DIR/sandgate.db`"),
    },
    "vault": {
        "url": Key("", "OpenBao/Vault address (default `VAULT_ADDR`)"),
        "token": Key("", "token (default `VAULT_TOKEN`)"),
        "namespace": Key("", "namespace (default `VAULT_NAMESPACE`)"),
        "role_id": Key("", "AppRole role id (with `secret_id`: log in with AppRole)"),
        "secret_id": Key("", "AppRole secret id"),
        "ca_cert": Key("", "CA bundle for the Vault server (default `VAULT_CACERT`)"),
    },
    "web": {
        "public_url": Key("", "the page's address as approvers reach it (`https://sandgate.example`): the links in "
                              "notifications; empty: the API listener's address"),
        "oidc": {
            "issuer": Key("", "OIDC issuer of approvers' ID tokens; with `audience`, the page requires a login"),
            "audience": Key("", "the audience (client id) ID tokens must name"),
            "approver_claim": Key("groups", "the claim that makes a user an approver"),
            "approver_value": Key("", "the value that claim must hold; empty: `sandgate-approvers`"),
        },
    },
    "secrets": Key({}, "`[secrets.NAME]` tables: the credentials sessions may use (keys below)"),
    "broker": {
        "cache_ttl_s": Key(30.0, "how long a secret read from a backend is cached", "number"),
    },
    "databases": Key({}, "`[databases.NAME]` tables: the PostgreSQL gateway's databases (keys below)"),
    "notify": {
        "webhook_url": Key("", "every approval filed or decided is POSTed here (http or https); off while empty"),
        "secret": Key("", "the HMAC key of `X-Sandgate-Signature`, or a secret source holding it (a value starting "
                          "`env:`, `local:` or `vault:`); required with format `json`"),
        "format": Key("json", "`json` (the event, signed) or `slack` (an incoming-webhook message linking to the "
                              "approval on the page at `web.public_url`)"),
        "timeout_s": Key(10.0, "longest one delivery may take; past it the attempt failed and is retried", "number"),
        "max_outbox": Key(10000, "events waiting for delivery; past it the oldest are dropped (audited)"),
        "max_age_s": Key(86400.0, "an event not delivered within this long is dropped (audited)", "number"),
    },
}


def _defaults(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _defaults(v) if isinstance(v, Mapping) else copy.deepcopy(v.default) for k, v in schema.items()}


DEFAULTS: dict[str, Any] = _defaults(SCHEMA)

_TYPES = {"bool": (bool,), "int": (int,), "number": (int, float), "str": (str,), "list": (list,), "map": (dict,)}
_TYPE_WORDS = {"bool": "true or false", "int": "an integer", "number": "a number", "str": "a string",
               "list": "a list", "map": "a table"}


def _value_word(value: Any) -> str:
    for word, cls in (("true/false", bool), ("an integer", int), ("a number", float), ("a string", str),
                      ("a list", list), ("a table", dict)):
        if isinstance(value, cls):
            return word
    return type(value).__name__


def check_document(doc: Mapping[str, Any], schema: Mapping[str, Any] = SCHEMA, where: str = "") -> None:
    """ValueError naming the first key or section of `doc` that `schema` does not have, or a value not of its
    key's type. Table values (`secrets`, `databases`, `resolve`) are left to their own parsers."""
    for name, value in doc.items():
        path = f"{where}.{name}" if where else str(name)
        entry = schema.get(name)
        if entry is None:
            close = difflib.get_close_matches(str(name), list(schema), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            if isinstance(value, Mapping):
                raise ValueError(f"unknown section [{path}]{hint}")
            raise ValueError(f"unknown key {path!r}{hint}")
        if isinstance(entry, Mapping):
            if not isinstance(value, Mapping):
                raise ValueError(f"[{path}] must be a table, got {_value_word(value)}")
            check_document(value, entry, path)
            continue
        kind = entry.type
        if not isinstance(value, _TYPES[kind]) or (isinstance(value, bool) and kind != "bool"):
            raise ValueError(f"{path} must be {_TYPE_WORDS[kind]}, got {_value_word(value)} ({value!r})"[:300])
        if isinstance(value, float) and not math.isfinite(value):        # TOML's nan and inf, an override's "nan"
            raise ValueError(f"{path} must be a finite number, got {value!r}")


def parse_hostport(text: str) -> tuple[str, int]:
    """'127.0.0.1:8080' / '[::1]:8080' / ':8080' -> (host, port). ValueError when malformed."""
    text = text.strip() if isinstance(text, str) else ""
    try:
        host, port_s = split_hostport(text, bare_ipv6=False)
    except ValueError:
        raise ValueError(f"bad listen address {text!r} (want HOST:PORT)") from None
    if port_s is None:
        raise ValueError(f"bad listen address {text!r} (want HOST:PORT)")
    if not port_s.isdigit() or not 0 <= int(port_s) <= 65535:
        raise ValueError(f"bad port in {text!r}")
    return host, int(port_s)


def _merge(base: dict, over: Mapping) -> dict:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _coerce(raw: str, like: Any) -> Any:
    if isinstance(like, bool):
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off", ""):
            return False
        raise ValueError(f"not a boolean: {raw!r}")
    if isinstance(like, (int, float)):
        try:
            return int(raw)
        except ValueError:
            pass
        try:
            return float(raw)           # the schema's check says whether this key takes a fraction
        except ValueError:
            raise ValueError(f"want a number, got {raw[:80]!r}") from None
    if isinstance(like, (list, dict)):
        example = '["a", "b"]' if isinstance(like, list) else '{"name": ["value"]}'
        word = "list" if isinstance(like, list) else "object"
        try:
            value = json.loads(raw)
        except ValueError:
            value = None
        if not isinstance(value, type(like)):
            raise ValueError(f"want a JSON {word}, e.g. {example}, got {raw[:80]!r}")
        return value
    return raw


def _lookup(base: Mapping, path: list[str]) -> Any:
    like: Any = base
    for part in path:
        like = like.get(part) if isinstance(like, Mapping) else None
    return like


def _from_file(name: str, environ: Mapping[str, str], path: list[str], base: Mapping) -> tuple[list[str], str] | None:
    """SANDGATE_STORE__URL_FILE=/run/secrets/store-url: the value of store.url is that file's content (one
    trailing newline dropped), as Docker and Kubernetes secrets are mounted. None when `name` is no such variable."""
    if not path[-1].endswith("_file") or _lookup(base, path) is not None:
        return None
    target = path[:-1] + [path[-1][:-len("_file")]]
    if _lookup(base, target) is None:
        return None
    if name[:-len("_FILE")] in environ:
        raise ValueError(f"{name}: {name[:-len('_FILE')]} is set too: set one of them")
    try:
        text = Path(environ[name]).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{name}: cannot read {environ[name]!r}: {exc}") from None
    return target, text[:-1] if text.endswith("\n") else text


def env_overrides(environ: Mapping[str, str], base: Mapping) -> dict:
    """SANDGATE_EGRESS__HOLD_TIMEOUT_S=30 -> {"egress": {"hold_timeout_s": 30}} (typed like the default).
    SANDGATE_<SECTION>__<KEY>_FILE=PATH reads the value from a file instead (secrets mounted as files)."""
    out: dict = {}
    for name, raw in environ.items():
        if not name.startswith("SANDGATE_") or "__" not in name:
            continue
        path = [p.lower() for p in name[len("SANDGATE_"):].split("__")]
        from_file = _from_file(name, environ, path, base)
        if from_file is not None:
            path, raw = from_file
        like = _lookup(base, path)
        try:
            value = _coerce(raw, like) if like is not None else raw
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


# -- typed sections ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TransparentSettings:
    """Transparent capture: a second proxy mode in the same mitmproxy master, and the filtering resolver."""

    listen: tuple[str, int]             # the transparent listener (connections redirected to it by nftables)
    dns_listen: tuple[str, int]         # the filtering resolver (UDP)
    sources: tuple[IPNetwork, ...]      # the source addresses a session may be bound to


@dataclass(frozen=True)
class ProxySettings:
    listen: tuple[str, int]
    advertise_url: str = ""             # host:port sandboxes reach the proxy at; "" = the bound listener
    transparent: TransparentSettings | None = None      # None: no transparent listener, no resolver
    postgres_listen: tuple[str, int] | None = None      # None: the PostgreSQL gateway is off
    postgres_advertise: str = ""        # host:port sandboxes reach the PostgreSQL gateway at; "" = the listener


@dataclass(frozen=True)
class ApiSettings:
    listen: tuple[str, int]
    harness_token_file: str = ""        # use this token instead of writing DATA_DIR/harness.token
    trusted_proxies: tuple[IPNetwork, ...] = ()     # whose X-Forwarded-Proto the API believes


@dataclass(frozen=True)
class EgressSettings:
    private_allow: tuple[IPNetwork, ...] = ()
    upstream_ca: str = ""
    passthrough: tuple[AllowEntry, ...] = ()
    raw_tcp: tuple[AllowEntry, ...] = ()
    inspect_max_bytes: int = 1048576
    hold_timeout_s: float = 300.0
    drain_s: float = 0.0                # SIGTERM: how long held requests may still be decided
    resolve: Mapping[str, tuple[str, ...]] = MappingProxyType({})     # normalised name -> addresses
    package_registries: tuple[tuple[str, str], ...] = ()                 # (normalised host, ecosystem)
    package_max_bytes: int = 33554432
    upstream_proxy: UpstreamProxy | None = None
    max_held_bytes: int = 268435456     # request bodies held in memory for holds and inspection, all sessions


@dataclass(frozen=True)
class SessionSettings:
    """`[sessions]`: what one session may make sandgate hold at once, and how long it may live."""

    max_held: int = 8                   # egress requests held for approval at once, per session (beyond: 429)
    max_pending_approvals: int = 32     # pending approvals per session (beyond: the ask is a deny)
    max_connections: int = 64           # proxy client connections per session (beyond: refused)
    max_lifetime_s: int = 0             # persistent sessions: 0 = renewed for as long as the harness renews
    ephemeral_max_lifetime_s: int = 86400


BUDGET_KEYS = ("requests", "bytes_out", "bytes_in", "toolcalls", "denials_per_10m")


def parse_budgets(raw: Any, where: str) -> dict[str, int]:
    """A budgets table ({KEY: int >= 0}, 0 = none) -> the keys given. ValueError naming what is wrong."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a table of budgets")
    out = {}
    for key, value in raw.items():
        if key not in BUDGET_KEYS:
            raise ValueError(f"{where}: unknown budget {key!r} (one of {', '.join(BUDGET_KEYS)})")
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{where}.{key} must be an integer >= 0 (0 = none)")
        out[key] = value
    return out


@dataclass(frozen=True)
class ApprovalSettings:
    ttl_s: float = 3600.0
    quorum: int = 1
    reuse_window_s: float = 600.0
    max_grant_ttl_s: float = 86400.0        # the longest an access grant may last


@dataclass(frozen=True)
class AuditSettings:
    max_pending: int = 100000
    checkpoint_rows: int = 10000            # a signed checkpoint once this many rows were chained since the last
    checkpoint_interval_s: float = 60.0     # ... or this long after it (when rows were chained since)


@dataclass(frozen=True)
class PolicySettings:
    dir: str = ""                       # "" = the policies shipped in the package
    engine: str = "embedded"
    opa_url: str = "http://127.0.0.1:8181"
    timeout_s: float = 2.0
    workers: int = 2
    isolation: str = "process"
    opa_push: bool = True               # push policy.dir to the OPA server (false: it loads its own bundles)
    shadow_dir: str = ""                # a candidate policy evaluated beside the live one as a dry run
    decision_log: bool = True           # log every decision (gateway/policy/decisionlog.py)


@dataclass(frozen=True)
class VaultSettings:
    url: str = ""
    token: str = ""
    namespace: str = ""
    role_id: str = ""
    secret_id: str = ""
    ca_cert: str = ""

    def as_mapping(self) -> dict[str, str]:
        return {"url": self.url, "token": self.token, "namespace": self.namespace, "role_id": self.role_id,
                "secret_id": self.secret_id, "ca_cert": self.ca_cert}


@dataclass(frozen=True)
class NotifySettings:
    webhook_url: str = ""               # "" = notifications off
    secret: str = ""                    # the key, or a secret source (`secret_source`)
    format: str = "json"
    timeout_s: float = 10.0
    max_outbox: int = 10000
    max_age_s: float = 86400.0
    public_url: str = ""                # web.public_url, without a trailing slash


def secret_source(value: str) -> bool:
    """Whether a key that holds a secret names a source to read it from (`env:`, `local:`, `vault:`) rather than
    being the value itself."""
    return value.startswith(("env:", "local:", "vault:"))


def _http_url(where: str, text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{where} must be an http(s) URL with a host")   # never echoed: it may hold a token
    return text


def _notify(raw: Mapping[str, Any], web: Mapping[str, Any]) -> NotifySettings:
    public_url = _http_url("web.public_url", str(web["public_url"])).rstrip("/") if web["public_url"] else ""
    url, secret, fmt = str(raw["webhook_url"]), str(raw["secret"]), str(raw["format"])
    if fmt not in ("json", "slack"):
        raise ValueError(f"notify.format must be json or slack, got {fmt!r}")
    if secret_source(secret):
        try:
            parse_source(secret)
        except ValueError as exc:
            raise ValueError(f"notify.secret: {exc}") from None
    if url:
        _http_url("notify.webhook_url", url)
        if fmt == "json" and not secret:
            raise ValueError("notify.secret is required: deliveries are signed (the key, or a source such as env:VAR)")
    timeout = _positive("notify", "timeout_s", raw["timeout_s"])
    if timeout > 30:
        raise ValueError("notify.timeout_s must be at most 30")
    return NotifySettings(url, secret, fmt, float(timeout), _count("notify", "max_outbox", raw["max_outbox"]),
                          float(_positive("notify", "max_age_s", raw["max_age_s"])), public_url)


DEFAULT_APPROVER_VALUE = "sandgate-approvers"


@dataclass(frozen=True)
class OidcSettings:
    issuer: str
    audience: str
    approver_claim: str
    approver_value: str

    @classmethod
    def from_config(cls, raw: Mapping[str, Any]) -> "OidcSettings | None":
        issuer, audience = str(raw.get("issuer") or "").strip(), str(raw.get("audience") or "").strip()
        if not issuer or not audience:
            return None
        _http_url("web.oidc.issuer", issuer)
        return cls(issuer=issuer, audience=audience,
                   approver_claim=str(raw.get("approver_claim") or "groups"),
                   approver_value=str(raw.get("approver_value") or DEFAULT_APPROVER_VALUE))


@dataclass(frozen=True)
class BrokerSettings:
    secrets: Mapping[str, SecretSpec] = MappingProxyType({})     # `[secrets.NAME]`, validated
    vault: VaultSettings = VaultSettings()
    cache_ttl_s: float = 30.0


@dataclass(frozen=True)
class Config:
    data_dir: Path
    proxy: ProxySettings
    api: ApiSettings
    egress: EgressSettings
    approvals: ApprovalSettings
    audit: AuditSettings
    policy: PolicySettings
    store_url: str                      # sqlite:///DATA_DIR/sandgate.db unless `store.url` says otherwise
    broker: BrokerSettings
    oidc: OidcSettings | None
    databases: Mapping[str, DatabaseSettings] = MappingProxyType({})    # `[databases.NAME]`, validated
    sessions: SessionSettings = SessionSettings()
    budgets: Mapping[str, Mapping[str, int]] = MappingProxyType({})    # workload -> {budget key: limit, 0 = none}
    notify: NotifySettings = NotifySettings()
    path: Path | None = None
    raw: Mapping[str, Any] = MappingProxyType({})  # the merged document as read: diagnostics and tests only

    @property
    def proxy_listen(self) -> tuple[str, int]:
        return self.proxy.listen

    @property
    def api_listen(self) -> tuple[str, int]:
        return self.api.listen

    @property
    def api_url(self) -> str:
        host, port = self.api.listen
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}"


def _networks(where: str, cidrs: Any) -> tuple[IPNetwork, ...]:
    try:
        return parse_networks(cidrs)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _listen(where: str, text: Any) -> tuple[str, int]:
    try:
        return parse_hostport(text)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _entries(where: str, items: Any) -> tuple[AllowEntry, ...]:
    try:
        return tuple(parse_allow_entry(e) for e in items)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _resolve(resolve: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(resolve, Mapping) or not all(isinstance(v, list) and v for v in resolve.values()):
        raise ValueError("egress.resolve must map names to non-empty lists of addresses")
    try:
        names = {normalise_host(str(k)): tuple(str(a) for a in v) for k, v in resolve.items()}
    except ValueError as exc:
        raise ValueError(f"egress.resolve: {exc}") from None
    for name, addresses in names.items():
        for address in addresses:
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise ValueError(f"egress.resolve: {address[:80]!r} (for {name}) is not an IP address") from None
    return names


def _ca_file(where: str, name: str) -> None:
    """A CA bundle: a readable file holding at least one PEM certificate (another file started sandgate, and then
    every upstream TLS handshake failed)."""
    try:
        data = Path(name).read_bytes()
    except OSError:
        raise ValueError(f"{where}: no such file {name!r}") from None
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise ValueError(f"{where}: {name!r} holds no PEM certificate")


def _positive(section: str, key: str, value: Any) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{section}.{key} must be a positive number")
    return value


def _egress(eg: Mapping[str, Any]) -> EgressSettings:
    raw_tcp = _entries("egress.raw_tcp", eg["raw_tcp"])
    for text, entry in zip(eg["raw_tcp"], raw_tcp):
        if entry.port is None:
            raise ValueError(f"egress.raw_tcp: {text!r} needs a port (\"host:port\")")
    names = _resolve(eg["resolve"])
    if eg["upstream_ca"]:
        _ca_file("egress.upstream_ca", eg["upstream_ca"])
    return EgressSettings(
        package_registries=_package_registries(eg["package_registries"]),
        package_max_bytes=int(_positive("egress", "package_max_bytes", eg["package_max_bytes"])),
        private_allow=_networks("egress.private_allow", eg["private_allow"]), upstream_ca=str(eg["upstream_ca"]),
        passthrough=_entries("egress.passthrough", eg["passthrough"]), raw_tcp=raw_tcp,
        inspect_max_bytes=int(_positive("egress", "inspect_max_bytes", eg["inspect_max_bytes"])),
        hold_timeout_s=float(_positive("egress", "hold_timeout_s", eg["hold_timeout_s"])),
        drain_s=_drain(eg["drain_s"]),
        max_held_bytes=_count("egress", "max_held_bytes", eg["max_held_bytes"]),
        resolve=MappingProxyType(names), upstream_proxy=_upstream_proxy(eg))


def _drain(value: Any) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise ValueError("egress.drain_s must be a number of seconds, 0 or more")
    return float(value)


def _upstream_proxy(eg: Mapping[str, Any]) -> UpstreamProxy | None:
    for key in ("upstream_proxy_user", "upstream_proxy_password"):
        if eg[key]:
            try:
                parse_source(str(eg[key]))
            except ValueError as exc:
                raise ValueError(f"egress.{key}: {exc}") from None
    if not isinstance(eg["upstream_proxy_bypass"], list):
        raise ValueError("egress.upstream_proxy_bypass must be a list")
    return parse_upstream_proxy(eg["upstream_proxy"], str(eg["upstream_proxy_user"] or ""),
                                str(eg["upstream_proxy_password"] or ""), str(eg["upstream_proxy_resolve"]),
                                eg["upstream_proxy_bypass"])


def _count(section: str, key: str, value: Any, minimum: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{section}.{key} must be an integer >= {minimum}")
    return value


def _sessions(raw: Mapping[str, Any]) -> SessionSettings:
    unknown = set(raw) - set(SessionSettings.__dataclass_fields__)
    if unknown:
        raise ValueError(f"sessions: unknown key {sorted(unknown)[0]!r}")
    return SessionSettings(
        max_held=_count("sessions", "max_held", raw["max_held"]),
        max_pending_approvals=_count("sessions", "max_pending_approvals", raw["max_pending_approvals"]),
        max_connections=_count("sessions", "max_connections", raw["max_connections"]),
        max_lifetime_s=_count("sessions", "max_lifetime_s", raw["max_lifetime_s"], 0),
        ephemeral_max_lifetime_s=_count("sessions", "ephemeral_max_lifetime_s", raw["ephemeral_max_lifetime_s"]))


def _budgets(raw: Any) -> Mapping[str, Mapping[str, int]]:
    """`[budgets.WORKLOAD]` -> {workload: {key: limit}} with every key (0 = none)."""
    if not isinstance(raw, Mapping):
        raise ValueError("[budgets] must be a table of workloads")
    unknown = set(raw) - {"persistent", "ephemeral"}
    if unknown:
        raise ValueError(f"budgets: unknown workload {sorted(unknown)[0]!r} (persistent or ephemeral)")
    return MappingProxyType({w: MappingProxyType({**dict.fromkeys(BUDGET_KEYS, 0),
                                                  **parse_budgets(raw.get(w, {}), f"budgets.{w}")})
                             for w in ("persistent", "ephemeral")})


def _package_registries(raw: Any) -> tuple[tuple[str, str], ...]:
    """`egress.package_registries`: [{"host": "pypi.corp", "ecosystem": "PyPI"}, ...] (a host may serve both)."""
    if not isinstance(raw, list):
        raise ValueError("egress.package_registries must be a list of {host, ecosystem} tables")
    out = []
    for item in raw:
        unknown = sorted(set(item) - {"host", "ecosystem"}) if isinstance(item, Mapping) else []
        if unknown:
            raise ValueError(f"egress.package_registries: unknown key {str(unknown[0])[:80]!r} (host, ecosystem)")
        if not isinstance(item, Mapping) or set(item) != {"host", "ecosystem"}:
            raise ValueError("egress.package_registries: each entry is {host = \"...\", ecosystem = \"PyPI\" or "
                             f"\"npm\"}}, got {item!r}")
        eco = {"pypi": "PyPI", "npm": "npm"}.get(str(item["ecosystem"]).strip().lower())
        if eco is None:
            raise ValueError(f"egress.package_registries: unknown ecosystem {item['ecosystem']!r} (PyPI or npm)")
        try:
            host = normalise_host(str(item["host"]))
        except ValueError as exc:
            raise ValueError(f"egress.package_registries: {exc}") from None
        out.append((host, eco))
    return tuple(out)


def _approvals(ap: Mapping[str, Any]) -> ApprovalSettings:
    _count("approvals", "quorum", ap["quorum"])
    _positive("approvals", "ttl_s", ap["ttl_s"])
    if not isinstance(ap["reuse_window_s"], (int, float)) or ap["reuse_window_s"] < 0:
        raise ValueError("approvals.reuse_window_s must be a number of seconds >= 0")
    if isinstance(ap["max_grant_ttl_s"], bool) or not isinstance(ap["max_grant_ttl_s"], (int, float)) \
            or not 0 < ap["max_grant_ttl_s"] <= 31536000:
        raise ValueError("approvals.max_grant_ttl_s must be a number of seconds > 0 (at most a year)")
    return ApprovalSettings(ttl_s=float(ap["ttl_s"]), quorum=int(ap["quorum"]),
                            reuse_window_s=float(ap["reuse_window_s"]),
                            max_grant_ttl_s=float(ap["max_grant_ttl_s"]))


def _policy(pol: Mapping[str, Any]) -> PolicySettings:
    if pol["isolation"] not in ("process", "thread"):
        raise ValueError("policy.isolation must be 'process' or 'thread'")
    if pol["engine"] not in ("embedded", "opa"):
        raise ValueError("policy.engine must be 'embedded' or 'opa'")
    if pol["dir"] and not Path(pol["dir"]).is_dir():
        raise ValueError(f"policy.dir: no such directory {pol['dir']!r}")
    if pol["shadow_dir"] and not Path(pol["shadow_dir"]).is_dir():
        raise ValueError(f"policy.shadow_dir: no such directory {pol['shadow_dir']!r}")
    _count("policy", "workers", pol["workers"])
    _positive("policy", "timeout_s", pol["timeout_s"])
    if pol["engine"] == "opa":
        url = urlsplit(str(pol["opa_url"]))
        if url.scheme not in ("http", "https") or not url.hostname or url.path not in ("", "/"):
            raise ValueError("policy.opa_url must be an http(s) URL without a path, e.g. http://127.0.0.1:8181")
    return PolicySettings(dir=str(pol["dir"]), engine=pol["engine"], opa_url=str(pol["opa_url"]),
                          timeout_s=float(pol["timeout_s"]), workers=int(pol["workers"]),
                          isolation=pol["isolation"], opa_push=bool(pol["opa_push"]),
                          shadow_dir=str(pol["shadow_dir"] or ""), decision_log=bool(pol["decision_log"]))


def _proxy(px: Mapping[str, Any]) -> ProxySettings:
    listen, dns = str(px["transparent_listen"] or "").strip(), str(px["dns_listen"] or "").strip()
    transparent = None
    if bool(listen) != bool(dns):
        raise ValueError("proxy.transparent_listen and proxy.dns_listen go together: set both or neither")
    if listen:
        sources = _networks("proxy.transparent_sources", px["transparent_sources"])
        if not sources:
            raise ValueError("proxy.transparent_sources must list the networks sandboxes connect from")
        transparent = TransparentSettings(_listen("proxy.transparent_listen", listen),
                                          _listen("proxy.dns_listen", dns), sources)
    pg_listen = str(px["postgres_listen"] or "").strip()
    pg_adv = str(px["postgres_advertise"] or "").strip()
    if pg_adv:
        _listen("proxy.postgres_advertise", pg_adv)
    advertise = str(px["advertise_url"] or "").strip()
    if advertise:
        _advertised(advertise)
    return ProxySettings(_listen("proxy.listen", px["listen"]), advertise, transparent,
                         _listen("proxy.postgres_listen", pg_listen) if pg_listen else None, pg_adv)


def _advertised(text: str) -> None:
    """`proxy.advertise_url`: HOST:PORT, optionally as `http://HOST:PORT` (what goes into a session's proxy_url)."""
    bare = text.split("://", 1)[-1].rstrip("/")
    scheme = text.split("://", 1)[0].lower() if "://" in text else "http"
    try:
        host, port = split_hostport(bare, bare_ipv6=False)
    except ValueError:
        host, port = "", None
    if scheme not in ("http", "https") or not host or port is None or not port.isdigit() or "/" in bare \
            or not 0 < int(port) < 65536 or any(c.isspace() or c in "@?#" for c in bare):
        raise ValueError(f"proxy.advertise_url must be HOST:PORT (or http://HOST:PORT), got {text[:80]!r}")


# -- [databases.NAME]: the PostgreSQL gateway (gateway/postgres/) ----------------------------------------

TLS_MODES = ("verify-full", "require", "disable")
# The keys of a `[databases.NAME]` table and what each means (docs/reference.md is generated from this).
DATABASE_DOC: dict[str, tuple[str, str]] = {       # key -> (default, meaning)
    "upstream": ("required", "host:port of the real server, dialled at that address (no `egress.private_allow` "
                             "check)"),
    "dbname": ("required", "the upstream database"),
    "user": ("required", "the upstream role"),
    "password": ("required", "a secret source: `vault:MOUNT/PATH#KEY`, `local:NAME`, `env:VAR`"),
    "tls": ('"verify-full"', "to the upstream: `verify-full`, `require` or `disable`; below `verify-full` only "
                             "SCRAM-SHA-256 is answered"),
    "upstream_ca": ('""', "a CA bundle trusted for the upstream, added to the public roots"),
    "env": ("`NAME_DATABASE_URL`", "the variable of the session's `env` holding its URL"),
    "max_connections_per_session": ("10", "connections one session may hold to this database; beyond: "
                                          "`FATAL 53300`"),
    "hold_timeout_s": ("60", "how long an asked statement waits for its approval (its transaction's locks are "
                             "held meanwhile)"),
}
DATABASE_KEYS = frozenset(DATABASE_DOC)
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class DatabaseSettings:
    name: str                    # what sessions and policies call it
    host: str
    port: int
    dbname: str
    user: str
    password: str                # a secret source (vault:, local:, env:), never the value
    tls: str = "verify-full"
    upstream_ca: str = ""
    env: str = ""
    max_connections_per_session: int = 10
    hold_timeout_s: float = 60.0

    @property
    def env_name(self) -> str:
        return self.env or self.name.upper() + "_DATABASE_URL"


def _hostport(text: str, where: str) -> tuple[str, int]:
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = text.rpartition(":") if text.count(":") == 1 else (text, "", "")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{where}: want HOST:PORT, got {text!r}")
    return host, int(port)


def parse_database(name: str, raw: Any) -> DatabaseSettings:
    where = f"databases.{name}"
    if not _NAME.match(name):
        raise ValueError(f"{where}: a database name is lower-case letters, digits and _ (starting with a letter)")
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a table")
    unknown = set(raw) - DATABASE_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    for key in ("upstream", "dbname", "user", "password"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise ValueError(f"{where}.{key} is required (a string)")
    try:
        parse_source(raw["password"])
    except ValueError as exc:
        raise ValueError(f"{where}.password: {exc}") from None
    host, port = _hostport(raw["upstream"], f"{where}.upstream")
    tls = raw.get("tls", "verify-full")
    if tls not in TLS_MODES:
        raise ValueError(f"{where}.tls must be one of {', '.join(TLS_MODES)}")
    ca = raw.get("upstream_ca", "")
    if not isinstance(ca, str):
        raise ValueError(f"{where}.upstream_ca must be a file name")
    if ca:
        _ca_file(f"{where}.upstream_ca", ca)
    env = raw.get("env", "")
    if not isinstance(env, str) or (env and not _ENV.match(env)):
        raise ValueError(f"{where}.env must be an environment variable name")
    limit = raw.get("max_connections_per_session", 10)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"{where}.max_connections_per_session must be a positive integer")
    hold = raw.get("hold_timeout_s", 60)
    if not isinstance(hold, (int, float)) or isinstance(hold, bool) or not 0 < hold < math.inf:
        raise ValueError(f"{where}.hold_timeout_s must be a positive number")
    return DatabaseSettings(name=name, host=host, port=port, dbname=raw["dbname"], user=raw["user"],
                            password=raw["password"], tls=tls, upstream_ca=ca, env=env,
                            max_connections_per_session=limit, hold_timeout_s=float(hold))


def parse_databases(raw: Any) -> dict[str, DatabaseSettings]:
    if not isinstance(raw, Mapping):
        raise ValueError("[databases] must be a table of tables")
    out = {name: parse_database(name, table) for name, table in raw.items()}
    envs = [d.env_name for d in out.values()]
    if len(envs) != len(set(envs)):
        raise ValueError("databases: two databases use the same env variable")
    return out


def postgres_authority(advertise: str, bound: tuple[str, int]) -> str:
    """host:port in the sessions' database URLs: `proxy.postgres_advertise`, else the bound listener (a wildcard
    address named as loopback)."""
    if advertise.strip():
        return advertise.strip()
    host, port = bound
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _trusted_proxies(cidrs: Any) -> tuple[IPNetwork, ...]:
    try:
        return parse_networks(cidrs)
    except ValueError as exc:
        raise ValueError(f"api.trusted_proxies: {exc}") from None


_STORE_URL = re.compile(r"^(sqlite|postgresql)(\+\w+)?://", re.IGNORECASE)


def settings_from(raw: Mapping[str, Any], data_dir: Path, path: Path | None = None) -> Config:
    """The typed configuration of a merged document. ValueError on anything wrong."""
    mp = raw["audit"]["max_pending"]
    if not isinstance(mp, int) or isinstance(mp, bool) or mp < 1:
        raise ValueError("audit.max_pending must be a positive integer")
    if not isinstance(raw["secrets"], Mapping):
        raise ValueError("[secrets] must be a table of tables")
    store_url = str(raw["store"]["url"] or "")
    if store_url and not _STORE_URL.match(store_url):
        raise ValueError("store.url must be sqlite:///PATH or postgresql://USER@HOST/DB (postgresql+DRIVER:// too)")
    if raw["vault"]["url"]:
        _http_url("vault.url", str(raw["vault"]["url"]))
    cache_ttl = raw["broker"]["cache_ttl_s"]
    if cache_ttl < 0:
        raise ValueError("broker.cache_ttl_s must be a number of seconds >= 0")
    if isinstance(raw["databases"], Mapping) and raw["databases"] and not str(raw["proxy"]["postgres_listen"]).strip():
        raise ValueError(f"databases.{sorted(raw['databases'])[0]}: the PostgreSQL gateway is off: set "
                         f"proxy.postgres_listen (sessions could not be given the database)")
    oidc = raw["web"]["oidc"]
    if bool(str(oidc["issuer"]).strip()) != bool(str(oidc["audience"]).strip()):    # one alone: no login at all
        raise ValueError("web.oidc.issuer and web.oidc.audience go together: set both or neither")
    vault = VaultSettings(**{k: str(v or "") for k, v in raw["vault"].items() if k in VaultSettings.__dataclass_fields__})
    broker = BrokerSettings(secrets=MappingProxyType(parse_secret_specs(raw["secrets"], normalise_host)),
                            vault=vault, cache_ttl_s=float(raw["broker"]["cache_ttl_s"]))
    return Config(
        data_dir=data_dir, path=path,
        proxy=_proxy(raw["proxy"]),
        api=ApiSettings(_listen("api.listen", raw["api"]["listen"]), str(raw["api"]["harness_token_file"] or ""),
                        _trusted_proxies(raw["api"]["trusted_proxies"])),
        egress=_egress(raw["egress"]), approvals=_approvals(raw["approvals"]), audit=AuditSettings(
            mp, int(_positive("audit", "checkpoint_rows", raw["audit"]["checkpoint_rows"])),
            float(_positive("audit", "checkpoint_interval_s", raw["audit"]["checkpoint_interval_s"]))),
        policy=_policy(raw["policy"]),
        store_url=str(raw["store"]["url"] or "") or f"sqlite:///{data_dir / 'sandgate.db'}",
        broker=broker, oidc=OidcSettings.from_config((raw.get("web") or {}).get("oidc") or {}),
        databases=MappingProxyType(parse_databases(raw["databases"])), sessions=_sessions(raw["sessions"]),
        budgets=_budgets(raw["budgets"]), notify=_notify(raw["notify"], raw["web"]), raw=MappingProxyType(raw))


def load_config(path: str | os.PathLike | None = None, data_dir: str | os.PathLike | None = None,
                environ: Mapping[str, str] | None = None, overrides: Mapping | None = None) -> Config:
    environ = os.environ if environ is None else environ
    raw = copy.deepcopy(DEFAULTS)
    cfg_path = Path(path) if path else None
    if cfg_path is None and environ.get("SANDGATE_CONFIG"):
        cfg_path = Path(environ["SANDGATE_CONFIG"])
    if cfg_path is not None:
        try:
            with open(cfg_path, "rb") as fh:
                raw = _merge(raw, tomllib.load(fh))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(f"cannot read config {cfg_path}: {exc}") from None
    raw = _merge(raw, env_overrides(environ, DEFAULTS))
    if overrides:
        raw = _merge(raw, overrides)
    check_document(raw)
    ddir = Path(data_dir or environ.get("SANDGATE_DATA_DIR") or raw.get("data_dir") or ".sandgate")
    return settings_from(raw, ddir.resolve(), cfg_path)
