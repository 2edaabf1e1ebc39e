"""What a session is, as pure functions of plain values: the spec a harness asks for (validated), renewal,
status, ownership, the sandbox environment. No I/O; `now` is passed in."""
from __future__ import annotations

import ipaddress
import secrets as pysecrets
from dataclasses import dataclass, field
from typing import Any, Collection, Mapping, Sequence

from gateway.config import parse_budgets
from gateway.net.addresses import IPNetwork
from gateway.net.hosts import parse_allow_entry
from gateway.store.records import Session

WORKLOADS = {"ephemeral": 3600, "persistent": 7 * 24 * 3600}
STAT_KEYS = ("requests", "denied", "asked", "bytes_out", "bytes_in", "toolcalls")
# The longest a session may live from its creation, when nothing sets a ceiling (`sessions.max_lifetime_s = 0`,
# the default for persistent sessions): about a century, so in practice the harness renews it for as long as it
# wants; the session token's `exp` is that ceiling, and the token dies with the session row before.
MAX_TTL_S = 100 * 365 * 24 * 3600
# What one session may make sandgate hold (its row, every policy input, the approval page): a larger spec is 400.
MAX_LABELS = 64                 # labels of a session
MAX_LABEL_KEY = 128             # characters of a label's name
MAX_LABEL_VALUE = 1024          # characters of a label's value
MAX_ALLOW = 256                 # host patterns in `allow`
MAX_NAMES = 64                  # names in `secrets`, in `databases`
MAX_PATH = 4096                 # characters of `workspace`, of `ca_path` (PATH_MAX)


def lifetime_ceiling(workload: str, max_lifetime_s: int = 0, ephemeral_max_lifetime_s: int = 86400) -> int:
    """How long a session of `workload` may live from its creation, in seconds: `sessions.ephemeral_max_lifetime_s`
    for ephemeral sessions, `sessions.max_lifetime_s` for persistent ones (0 = no ceiling: MAX_TTL_S)."""
    ceiling = ephemeral_max_lifetime_s if workload == "ephemeral" else max_lifetime_s
    return min(int(ceiling), MAX_TTL_S) if ceiling else MAX_TTL_S


def sum_stats(*parts: Mapping[str, int] | None) -> dict[str, int]:
    """Counters added key by key (missing parts and keys count 0)."""
    out = dict.fromkeys(STAT_KEYS, 0)
    for part in parts:
        if part:
            for k in STAT_KEYS:
                value = part.get(k)
                if value:
                    out[k] += int(value)
    return out


class BadRequest(ValueError):
    """A request body that does not fit the contract (-> 400)."""


def check_labels(labels: Any) -> dict:
    """A session's labels (create, PATCH): an object of at most MAX_LABELS strings, names and values capped."""
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise BadRequest("labels must be an object of strings")
    if len(labels) > MAX_LABELS:
        raise BadRequest(f"labels: at most {MAX_LABELS} labels (got {len(labels)})")
    for key, value in labels.items():
        if len(key) > MAX_LABEL_KEY or len(value) > MAX_LABEL_VALUE:
            raise BadRequest(f"labels: a name is at most {MAX_LABEL_KEY} characters and a value at most "
                             f"{MAX_LABEL_VALUE} (label {key[:40]!r})")
    return labels


def _names(body: Mapping[str, Any], key: str, what: str) -> list[str]:
    """`body[key]`: a list of at most MAX_NAMES names."""
    names = body.get(key, []) or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise BadRequest(f"{key} must be a list of names")
    if len(names) > MAX_NAMES:
        raise BadRequest(f"{key}: at most {MAX_NAMES} {what} (got {len(names)})")
    return names


@dataclass(frozen=True)
class SessionSpec:
    workload: str
    labels: dict
    allow: list[str]
    secrets: list[str]
    ttl_s: int
    workspace: str
    ca_path: str
    databases: list[str] = field(default_factory=list)
    budgets: dict = field(default_factory=dict)         # the session's own budgets (budgets.py), keys given only


def parse_session_spec(body: Any, known_secrets: Mapping[str, Any],
                       known_databases: Collection[str] = (), lifetimes: tuple[int, int] = (0, 86400)) -> SessionSpec:
    """`lifetimes`: (`sessions.max_lifetime_s`, `sessions.ephemeral_max_lifetime_s`)."""
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    workload = body.get("workload", "ephemeral")
    if workload not in WORKLOADS:
        raise BadRequest("workload must be 'ephemeral' or 'persistent'")
    labels = check_labels(body.get("labels", {}) or {})
    allow_raw = body.get("allow", []) or []
    if not isinstance(allow_raw, list) or not all(isinstance(a, str) for a in allow_raw):
        raise BadRequest("allow must be a list of host patterns")
    if len(allow_raw) > MAX_ALLOW:
        raise BadRequest(f"allow: at most {MAX_ALLOW} host patterns (got {len(allow_raw)})")
    try:
        allow = list(dict.fromkeys(str(parse_allow_entry(a)) for a in allow_raw))
    except ValueError as exc:
        raise BadRequest(f"allow: {str(exc)[:300]}") from None
    names = _names(body, "secrets", "secrets")
    unknown = [n for n in names if n not in known_secrets]
    if unknown:
        raise BadRequest(f"unknown secrets: {', '.join(sorted(unknown))}"[:400])
    databases = _names(body, "databases", "databases")
    unknown = [n for n in databases if n not in known_databases]
    if unknown:
        raise BadRequest(f"unknown databases: {', '.join(sorted(unknown))}"[:400]
                         + ("" if known_databases else " (this sandgate has no PostgreSQL gateway configured)"))
    ceiling = lifetime_ceiling(workload, *lifetimes)
    ttl = body.get("ttl_s", min(WORKLOADS[workload], ceiling))
    if not isinstance(ttl, int) or isinstance(ttl, bool) or not 0 < ttl <= ceiling:
        raise BadRequest(f"ttl_s must be an integer between 1 and {ceiling} (a {workload} session's lifetime)")
    workspace = body.get("workspace", "/workspace")
    ca_path = body.get("ca_path", "/etc/sandgate/ca.pem")
    for key, val in (("workspace", workspace), ("ca_path", ca_path)):
        if not isinstance(val, str) or not val.startswith("/") or "\0" in val:
            raise BadRequest(f"{key} must be an absolute path")
        if len(val) > MAX_PATH:
            raise BadRequest(f"{key}: at most {MAX_PATH} characters")
    try:
        own = parse_budgets(body.get("budgets") or {}, "budgets")
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    return SessionSpec(workload, labels, allow, list(dict.fromkeys(names)), ttl, workspace.rstrip("/") or "/", ca_path,
                       list(dict.fromkeys(databases)), own)


def parse_source(value: Any, networks: Sequence[IPNetwork]) -> str:
    """A session's source address (transparent capture): one IP address, in its canonical text, inside one of
    `networks` (`proxy.transparent_sources`). An IPv4-mapped IPv6 address is taken as its IPv4 form."""
    if not isinstance(value, str) or not value.strip():
        raise BadRequest("source must be an IP address")
    try:
        addr = ipaddress.ip_address(value.strip())
    except ValueError:
        raise BadRequest("source must be an IP address") from None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    if not any(addr.version == net.version and addr in net for net in networks):
        raise BadRequest(f"source {addr} is outside proxy.transparent_sources")
    return str(addr)


def renewed_expiry(row: Session, ttl_s: Any, now: float, ceiling_s: int = MAX_TTL_S) -> float:
    """The new `expires_at` for a renewal (PATCH `ttl_s`): `now + ttl_s`, never past `created_at + ceiling_s`
    (`lifetime_ceiling`: the session token's own expiry)."""
    if not isinstance(ttl_s, int) or isinstance(ttl_s, bool) or ttl_s <= 0:
        raise BadRequest("ttl_s must be a positive integer")
    limit = float(row.created_at) + ceiling_s
    if now + ttl_s > limit:
        raise BadRequest(f"a session lives at most {ceiling_s} s from its creation (sessions.max_lifetime_s, "
                         f"sessions.ephemeral_max_lifetime_s); ttl_s may be at most {max(0, int(limit - now))} now")
    return now + ttl_s


def new_session_id() -> str:
    return "s_" + pysecrets.token_hex(8)


def session_status(row: Session, now: float) -> str:
    if row.deleted_at:
        return "deleted"
    if now >= float(row.expires_at):
        return "expired"
    return "active"


def owns(role: str, ident: str, row: Session) -> bool:
    """Whether a caller may see a session: admin sees every session, a harness only those it created."""
    return role == "admin" or (role == "harness" and row.created_by == ident)


def proxy_authority(advertise_url: str, bound: tuple[str, int]) -> str:
    """host:port sandboxes reach the proxy at: `proxy.advertise_url` (scheme and slash dropped), else the bound
    listener (a wildcard address named as loopback)."""
    adv = advertise_url.strip()
    if adv:
        return adv.split("://", 1)[-1].rstrip("/")
    host, port = bound
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def build_env(proxy_url: str, ca_path: str, placeholder_env: Mapping[str, str]) -> dict[str, str]:
    env = {
        "HTTP_PROXY": proxy_url, "HTTPS_PROXY": proxy_url, "http_proxy": proxy_url, "https_proxy": proxy_url,
        "NO_PROXY": "", "no_proxy": "",
    }
    for var in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO",
                "NODE_EXTRA_CA_CERTS"):
        env[var] = ca_path
    env.update(placeholder_env)
    return env
