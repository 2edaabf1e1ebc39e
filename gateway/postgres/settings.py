"""`[databases.NAME]` tables and the gateway's listener: parsed and validated at load (pure)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from broker.sources import parse_source

TLS_MODES = ("verify-full", "require", "disable")
DATABASE_KEYS = {"upstream", "dbname", "user", "password", "tls", "upstream_ca", "env", "max_connections_per_session",
                 "hold_timeout_s"}
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
    if not isinstance(ca, str) or (ca and not Path(ca).is_file()):
        raise ValueError(f"{where}.upstream_ca: no such file {ca!r}")
    env = raw.get("env", "")
    if not isinstance(env, str) or (env and not _ENV.match(env)):
        raise ValueError(f"{where}.env must be an environment variable name")
    limit = raw.get("max_connections_per_session", 10)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"{where}.max_connections_per_session must be a positive integer")
    hold = raw.get("hold_timeout_s", 60)
    if not isinstance(hold, (int, float)) or isinstance(hold, bool) or hold <= 0:
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
