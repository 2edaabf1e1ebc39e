"""Secret specs: the `[secrets.NAME]` tables, validated (pure: no I/O, no clock).

`parse_secret_specs` checks the configuration (a bad table refuses to start); `local_spec` is the spec of a
secret stored with `sandgate secrets put`. Hosts are put in canonical form by the normaliser the caller passes
in (the gateway's one `normalise_host`), so the broker never has a host normaliser of its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from broker.inject import LOCATIONS
from broker.oauth2 import GITHUB_APP_KEYS, OAUTH2_KEYS, GitHubAppParams, OAuth2Params, parse_github_app, parse_oauth2
from broker.placeholders import PlaceholderFormat, parse_format
from broker.sources import parse_source

DEFAULT_INJECT_IN = frozenset({"header", "query"})
SPEC_KEYS = frozenset({"source", "hosts", "env", "format", "inject_in", "allow_plaintext", "ports", "kind"})
KIND_KEYS = {"token": frozenset(), "oauth2": OAUTH2_KEYS, "github_app": GITHUB_APP_KEYS, "aws": frozenset()}      # the keys each kind adds
AWS_KEYS = frozenset({"kind", "access_key_id", "secret_access_key", "session_token", "hosts", "allow_plaintext",
                      "ports"})
AWS_ENV = "AWS_ACCESS_KEY_ID"
HostNormaliser = Callable[[str], str]     # the gateway's one normalise_host (ValueError for a bad host)
# Variables sandgate itself sets in the sandbox: a secret must not shadow them.
RESERVED_ENV = frozenset({
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS",
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_CA_BUNDLE",     # an `aws` secret's
})
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_HOST = re.compile(r"(\*\.)?[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*\Z")


@dataclass(frozen=True)
class SecretSpec:
    name: str
    source: str
    hosts: tuple[str, ...]
    inject_in: frozenset[str] = DEFAULT_INJECT_IN
    env: str = ""  # "" -> NAME upper-cased, '-' and '.' as '_'
    format: PlaceholderFormat | None = None
    allow_plaintext: bool = False              # inject over cleartext http too (default: TLS only)
    ports: frozenset[int] = frozenset()        # only these destination ports (empty: any)
    kind: str = "token"                        # "token": the value swapped in; "oauth2": a minted access token
    oauth2: OAuth2Params | GitHubAppParams | None = None    # kinds "oauth2", "github_app": minted (source "")
    # More secret sources by field, for kinds made of several values ("aws": secret_access_key, session_token;
    # `source` is then the access key id's).
    sources: tuple[tuple[str, str], ...] = ()

    def source_of(self, field_name: str) -> str:
        """The source of one of the spec's values ("" when it has none)."""
        return dict(self.sources).get(field_name, "")

    def all_sources(self) -> tuple[str, ...]:
        """`source` and every other source the spec reads."""
        return (self.source,) + tuple(src for _f, src in self.sources if src)

    def __post_init__(self) -> None:
        if not self.env:
            object.__setattr__(self, "env", re.sub(r"[^A-Z0-9_]", "_", self.name.upper()))


def _host(name: str, entry: Any, normalise: HostNormaliser) -> str:
    if not isinstance(entry, str) or not entry.strip():
        raise ValueError(f"secrets.{name}.hosts: entries must be non-empty strings")
    text = entry.strip()
    if "/" in text or (text.count(":") == 1 and not text.startswith("[")):
        raise ValueError(f"secrets.{name}.hosts: {entry!r} is not a host name (no scheme, port or path)")
    try:
        wildcard = text.startswith("*.")
        host = ("*." if wildcard else "") + normalise(text[2:] if wildcard else text.strip("[]"))
    except ValueError:
        raise ValueError(f"secrets.{name}.hosts: {entry!r} is not a host name (no scheme, port or path)") from None
    if ":" in host and not host.startswith("*"):
        return host                                 # a canonical IPv6 literal
    if not _HOST.match(host) or len(host) > 253:
        raise ValueError(f"secrets.{name}.hosts: {entry!r} is not a host name (no scheme, port or path)")
    return host


def _ports(name: str, value: Any) -> frozenset[int]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not all(
            isinstance(p, int) and not isinstance(p, bool) and 1 <= p <= 65535 for p in value):
        raise ValueError(f"secrets.{name}.ports: a list of port numbers (1-65535)")
    return frozenset(value)


def _spec(name: str, table: Any, normalise: HostNormaliser) -> SecretSpec:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"secret name {name!r}: use letters, digits, '_', '.', '-' (max 64)")
    if not isinstance(table, Mapping):
        raise ValueError(f"secrets.{name} must be a table")
    kind = table.get("kind", "token")
    if kind not in KIND_KEYS:
        raise ValueError(f"secrets.{name}.kind: one of {sorted(KIND_KEYS)}")
    if kind == "aws":
        return _aws_spec(name, table, normalise)
    unknown = set(table) - SPEC_KEYS - KIND_KEYS[kind]
    if unknown:
        raise ValueError(f"secrets.{name}: unknown keys {sorted(unknown)}")
    oauth2 = parse_oauth2(name, table) if kind == "oauth2" else \
        parse_github_app(name, table) if kind == "github_app" else None
    if oauth2 is not None and "source" in table:
        raise ValueError(f"secrets.{name}: an oauth2 secret has no 'source' (its token is minted at token_url)")
    if oauth2 is None and "source" not in table:
        raise ValueError(f"secrets.{name}: 'source' is required")
    try:
        if oauth2 is None:
            parse_source(table["source"])
    except ValueError as exc:
        raise ValueError(f"secrets.{name}.source: {exc}") from None
    hosts = table.get("hosts")
    if isinstance(hosts, str) or not isinstance(hosts, Sequence) or not hosts:
        raise ValueError(f"secrets.{name}.hosts: a non-empty list of host names is required")
    inject_in = table.get("inject_in", sorted(DEFAULT_INJECT_IN))
    if isinstance(inject_in, str) or not isinstance(inject_in, Sequence) or not inject_in:
        raise ValueError(f"secrets.{name}.inject_in: a non-empty list from {sorted(LOCATIONS)}")
    bad = [x for x in inject_in if x not in LOCATIONS]
    if bad:
        raise ValueError(f"secrets.{name}.inject_in: unknown {bad}; allowed {sorted(LOCATIONS)}")
    env = table.get("env", "")
    if not isinstance(env, str) or (env and not _ENV.match(env)):
        raise ValueError(f"secrets.{name}.env: {env!r} is not a valid variable name")
    try:
        fmt = parse_format(table.get("format"))
    except ValueError as exc:
        raise ValueError(f"secrets.{name}.format: {exc}") from None
    allow_plaintext = table.get("allow_plaintext", False)
    if not isinstance(allow_plaintext, bool):
        raise ValueError(f"secrets.{name}.allow_plaintext must be true or false")
    spec = SecretSpec(name=name, source="" if oauth2 is not None else table["source"].strip(), kind=kind,
                      oauth2=oauth2,
                      hosts=tuple(dict.fromkeys(_host(name, h, normalise) for h in hosts)),
                      inject_in=frozenset(inject_in), env=env, format=fmt, allow_plaintext=allow_plaintext,
                      ports=_ports(name, table.get("ports", [])))
    if oauth2 is not None and allow_plaintext:
        raise ValueError(f"secrets.{name}.allow_plaintext: an oauth2 token is only ever sent over TLS")
    if spec.env.upper() in RESERVED_ENV or not _ENV.match(spec.env):
        raise ValueError(f"secrets.{name}.env: {spec.env!r} is reserved or invalid; set env explicitly")
    return spec


def _source_field(name: str, table: Mapping, key: str, required: bool) -> str:
    value = table.get(key, "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise ValueError(f"secrets.{name}.{key}: a secret source is required (vault:..., local:..., env:...)")
    if not value.strip():
        return ""
    try:
        parse_source(value)
    except ValueError as exc:
        raise ValueError(f"secrets.{name}.{key}: {exc}") from None
    return value.strip()


def _aws_spec(name: str, table: Mapping, normalise: HostNormaliser) -> SecretSpec:
    """`kind = "aws"`: every value a secret source; the sandbox holds placeholder keys, requests are signed again."""
    unknown = set(table) - AWS_KEYS
    if unknown:
        raise ValueError(f"secrets.{name}: unknown keys {sorted(unknown)} (kind = \"aws\")")
    hosts = table.get("hosts", ["*.amazonaws.com"])
    if isinstance(hosts, str) or not isinstance(hosts, Sequence) or not hosts:
        raise ValueError(f"secrets.{name}.hosts: a non-empty list of host names is required")
    allow_plaintext = table.get("allow_plaintext", False)
    if not isinstance(allow_plaintext, bool):
        raise ValueError(f"secrets.{name}.allow_plaintext must be true or false")
    sources = (("secret_access_key", _source_field(name, table, "secret_access_key", True)),
               ("session_token", _source_field(name, table, "session_token", False)))
    return SecretSpec(name=name, source=_source_field(name, table, "access_key_id", True),
                      hosts=tuple(dict.fromkeys(_host(name, h, normalise) for h in hosts)), inject_in=frozenset(),
                      env=AWS_ENV, allow_plaintext=allow_plaintext, ports=_ports(name, table.get("ports", [])),
                      kind="aws", sources=sources)


def parse_secret_specs(config_secrets: Mapping[str, Mapping], normalise: HostNormaliser) -> dict[str, SecretSpec]:
    """Validate the `[secrets.NAME]` tables (hosts put in canonical form by `normalise`). ValueError on anything
    wrong."""
    if not isinstance(config_secrets, Mapping):
        raise ValueError("[secrets] must be a table of tables")
    specs = {name: _spec(name, table, normalise) for name, table in config_secrets.items()}
    seen: dict[str, str] = {}
    for spec in specs.values():
        if spec.kind == "aws":
            continue                               # several may be defined; a session holds one
        if spec.env in seen:
            raise ValueError(f"secrets.{spec.name}.env: {spec.env!r} is also used by secrets.{seen[spec.env]}")
        seen[spec.env] = spec.name
    return specs


def check_session_secrets(names: Sequence[str], specs: Mapping[str, SecretSpec]) -> None:
    """ValueError when a session asks for more than one `aws` secret (the sandbox's AWS_* variables hold one)."""
    aws = [n for n in dict.fromkeys(names) if n in specs and specs[n].kind == "aws"]
    if len(aws) > 1:
        raise ValueError(f"a session holds one aws secret; asked for {', '.join(aws)}")


def local_spec(name: str, hosts: Sequence[str], normalise: HostNormaliser) -> SecretSpec:
    """A secret stored with `sandgate secrets put`: TLS only, any port. ValueError for a bad name or host."""
    return parse_secret_specs({name: {"source": f"local:{name}", "hosts": list(hosts)}}, normalise)[name]
