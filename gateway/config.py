"""Configuration: a TOML file, `SANDGATE_<SECTION>__<KEY>` environment overrides, validated at load.

Every key is optional. A bad value refuses to start (ValueError) rather than run degraded.
"""
from __future__ import annotations

import copy
import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

DEFAULTS: dict[str, Any] = {
    "proxy": {"listen": "127.0.0.1:8080", "advertise_url": ""},
    "api": {"listen": "127.0.0.1:8700", "harness_token_file": ""},
    "egress": {
        "private_allow": [],
        "upstream_ca": "",
        "passthrough": [],
        "raw_tcp": [],                 # "host:port" tunnels allowed to carry non-HTTP bytes
        "inspect_max_bytes": 1048576,
        "hold_timeout_s": 300,
        "resolve": {},                 # static name -> [addresses] map (like curl --resolve)
    },
    "approvals": {"ttl_s": 3600, "quorum": 1, "reuse_window_s": 600},
    "audit": {"max_pending": 100000},
    "policy": {"dir": "", "engine": "embedded", "opa_url": "http://127.0.0.1:8181",
               "timeout_s": 2.0, "workers": 2, "isolation": "process"},
    "store": {"url": ""},
    "vault": {"url": "", "token": "", "namespace": "", "role_id": "", "secret_id": "", "ca_cert": ""},
    "web": {"oidc": {"issuer": "", "audience": "", "approver_claim": "groups", "approver_value": ""}},
    "secrets": {},
    "broker": {"cache_ttl_s": 30.0},
}


def parse_hostport(text: str) -> tuple[str, int]:
    """'127.0.0.1:8080' / '[::1]:8080' -> (host, port). ValueError when malformed."""
    text = text.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError(f"bad listen address {text!r}")
        port_s = rest[1:]
    else:
        host, sep, port_s = text.rpartition(":")
        if not sep:
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
    if isinstance(like, int):
        return int(raw)
    if isinstance(like, float):
        return float(raw)
    if isinstance(like, (list, dict)):
        value = json.loads(raw)
        if not isinstance(value, type(like)):
            raise ValueError(f"expected JSON {type(like).__name__}: {raw!r}")
        return value
    return raw


def env_overrides(environ: Mapping[str, str], base: Mapping) -> dict:
    """SANDGATE_EGRESS__HOLD_TIMEOUT_S=30 -> {"egress": {"hold_timeout_s": 30}} (typed like the default)."""
    out: dict = {}
    for name, raw in environ.items():
        if not name.startswith("SANDGATE_") or "__" not in name:
            continue
        path = [p.lower() for p in name[len("SANDGATE_"):].split("__")]
        like: Any = base
        for part in path:
            like = like.get(part) if isinstance(like, Mapping) else None
        try:
            value = _coerce(raw, like) if like is not None else raw
        except (ValueError, json.JSONDecodeError) as exc:
            raise ValueError(f"{name}: {exc}") from None
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


@dataclass
class Config:
    raw: dict
    data_dir: Path
    path: Path | None = None
    derived: dict = field(default_factory=dict)

    @property
    def proxy_listen(self) -> tuple[str, int]:
        return parse_hostport(self.raw["proxy"]["listen"])

    @property
    def api_listen(self) -> tuple[str, int]:
        return parse_hostport(self.raw["api"]["listen"])

    @property
    def store_url(self) -> str:
        return self.raw["store"]["url"] or f"sqlite:///{self.data_dir / 'sandgate.db'}"

    @property
    def api_url(self) -> str:
        host, port = self.api_listen
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}"


def validate(raw: dict) -> None:
    parse_hostport(raw["proxy"]["listen"])
    parse_hostport(raw["api"]["listen"])
    eg = raw["egress"]
    from gateway.egress.addresses import parse_networks
    from gateway.egress.hosts import parse_allow_entry

    parse_networks(eg["private_allow"])
    for entry in eg["passthrough"]:
        parse_allow_entry(entry)
    for entry in eg["raw_tcp"]:
        if parse_allow_entry(entry).port is None:
            raise ValueError(f"egress.raw_tcp: {entry!r} needs a port (\"host:port\")")
    if not isinstance(eg["resolve"], Mapping) or not all(
            isinstance(v, list) and v for v in eg["resolve"].values()):
        raise ValueError("egress.resolve must map names to non-empty lists of addresses")
    for key in ("inspect_max_bytes", "hold_timeout_s"):
        if not isinstance(eg[key], (int, float)) or eg[key] <= 0:
            raise ValueError(f"egress.{key} must be a positive number")
    if eg["upstream_ca"] and not Path(eg["upstream_ca"]).is_file():
        raise ValueError(f"egress.upstream_ca: no such file {eg['upstream_ca']!r}")
    ap = raw["approvals"]
    if int(ap["quorum"]) < 1 or int(ap["ttl_s"]) <= 0:
        raise ValueError("approvals.quorum must be >= 1 and approvals.ttl_s > 0")
    if not isinstance(ap["reuse_window_s"], (int, float)) or ap["reuse_window_s"] < 0:
        raise ValueError("approvals.reuse_window_s must be a number of seconds >= 0")
    mp = raw["audit"]["max_pending"]
    if not isinstance(mp, int) or isinstance(mp, bool) or mp < 1:
        raise ValueError("audit.max_pending must be a positive integer")
    if raw["policy"]["isolation"] not in ("process", "thread"):
        raise ValueError("policy.isolation must be 'process' or 'thread'")
    if raw["policy"]["engine"] not in ("embedded", "opa"):
        raise ValueError("policy.engine must be 'embedded' or 'opa'")
    if raw["policy"]["dir"] and not Path(raw["policy"]["dir"]).is_dir():
        raise ValueError(f"policy.dir: no such directory {raw['policy']['dir']!r}")
    if not isinstance(raw["secrets"], Mapping):
        raise ValueError("[secrets] must be a table of tables")


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
    validate(raw)
    ddir = Path(data_dir or environ.get("SANDGATE_DATA_DIR") or raw.get("data_dir") or ".sandgate")
    return Config(raw=raw, data_dir=ddir.resolve(), path=cfg_path)
