"""The policy advisor (`sandgate policy suggest`): from the decision log's denials and the access requests people
were asked, proposals a person can review. Pure: rows and file texts in, proposals and file texts out; nothing
is applied (the CLI prints them, gateway/cli/suggest.py).

A proposal allows one host for the sessions that were denied it, as narrowly as they have in common: an entry of
`data.sandgate.config.egress.scoped_allow` (`{"hosts", "workload"?, "labels"?}`, the shipped egress policy's
scoped allowlist) whose workload and labels are the ones every denied session shared, and whose port is the one
they all used (an access request for any port pins none). Each comes with a Rego test (`site/suggested/HOST_test.rego`) that passes only once the proposed
data is in place: the host is allowed for such a session, and still denied for a session outside the scope, on
another port, and for another host.

Only denials an allow can cure count: an egress row denied with `egress.not_allowlisted` alone, for a host name
(an IP literal is never proposed). An access request counts unless a person denied it.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

CURABLE = ("egress.not_allowlisted",)
ALLOW_CODE = "egress.scoped_allow"
DATA_FILES = ("sandgate/config/egress/scoped_allow/data.json", "sandgate/config/data.json")
TEST_DIR = "site/suggested"
MAX_IDS = 5
WORKLOADS = ("ephemeral", "persistent")
_SLUG = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class Filters:
    since: float = 0.0
    workload: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    min_count: int = 3

    def session_matches(self, workload: Any, labels: Any) -> bool:
        if self.workload is not None and workload != self.workload:
            return False
        have = labels if isinstance(labels, dict) else {}
        return all(have.get(k) == v for k, v in self.labels)


@dataclass
class Evidence:
    """What the log holds for one host."""
    host: str
    denials: int = 0
    access_requests: int = 0
    ports: Counter = field(default_factory=Counter)
    methods: Counter = field(default_factory=Counter)
    scopes: dict[str, tuple[Any, dict]] = field(default_factory=dict)   # session -> (workload, labels)
    first: float = 0.0
    last: float = 0.0
    request_ids: list[str] = field(default_factory=list)
    access_ids: list[str] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)                      # the denials' inputs, for replay

    @property
    def count(self) -> int:
        return self.denials + self.access_requests

    def seen(self, ts: float) -> None:
        self.first = ts if not self.first else min(self.first, ts)
        self.last = max(self.last, ts)


@dataclass(frozen=True)
class Scope:
    workload: str | None
    labels: tuple[tuple[str, str], ...]

    def entry_key(self) -> tuple:
        return (self.workload, self.labels)

    def describe(self) -> str:
        words = [f"{self.workload} sessions" if self.workload else "sessions"]
        if self.labels:
            words.append("labelled " + ", ".join(f"{k}={v}" for k, v in self.labels))
        return " ".join(words) if self.workload or self.labels else "every session"


@dataclass
class Suggestion:
    host: str
    entry: str                    # the allow-list entry text: "host" or "host:port"
    scope: Scope
    evidence: Evidence
    test_path: str = ""
    test_text: str = ""
    replay: dict = field(default_factory=dict)    # filled by the caller: {"denied", "would_allow"}


def is_curable(row: Mapping[str, Any]) -> bool:
    """An egress denial that only a missing allow caused, for a host name."""
    if row.get("kind") != "egress":
        return False
    result = row.get("result") or {}
    if result.get("action") != "deny" or list(result.get("codes") or []) != list(CURABLE):
        return False
    request = (row.get("input") or {}).get("request") or {}
    host = request.get("host")
    return isinstance(host, str) and is_name(host) and request.get("ip_class", "") in ("", None)


def is_name(host: str) -> bool:
    """A DNS name (not an IP literal, not sandgate's own), in the form allow lists hold."""
    if not host or len(host) > 253 or host == "sandgate.internal" or ":" in host:
        return False
    labels = host.split(".")
    if len(labels) < 2 or labels[-1].isdigit():
        return False
    return all(re.fullmatch(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?", label) for label in labels)


def select(decisions: Iterable[Mapping[str, Any]], filters: Filters) -> list[Mapping[str, Any]]:
    """The denials that count: curable, in the time window, of a session the filters keep."""
    out = []
    for row in decisions:
        if row.get("ts", 0) < filters.since or not is_curable(row):
            continue
        session = row["input"].get("session") or {}
        if filters.session_matches(session.get("workload"), session.get("labels") or {}):
            out.append(row)
    return out


def gather(decisions: Iterable[Mapping[str, Any]], access: Iterable[Mapping[str, Any]],
           sessions: Mapping[str, Mapping[str, Any]], filters: Filters) -> dict[str, Evidence]:
    """Evidence per host from decision-log rows (`kind`, `ts`, `session`, `input`, `result`, `request_id`) and
    access-request approvals (`kind` access, `status`, `created_at`, `session`, `action.grant`). `sessions` gives
    an access request's session (`workload`, `labels`); one it does not know is left out."""
    found: dict[str, Evidence] = {}
    for row in select(decisions, filters):
        doc = row["input"]
        session = doc.get("session") or {}
        workload, labels = session.get("workload"), session.get("labels") or {}
        request = doc["request"]
        ev = found.setdefault(request["host"], Evidence(request["host"]))
        ev.denials += 1
        port = request.get("port")
        if isinstance(port, int) and not isinstance(port, bool):
            ev.ports[port] += 1
        ev.methods[str(request.get("method", ""))] += 1
        ev.scopes[str(row.get("session") or session.get("id") or "")] = (workload, labels)
        ev.seen(float(row.get("ts", 0)))
        ev.rows.append(row)
        if row.get("request_id") and len(ev.request_ids) < MAX_IDS:
            ev.request_ids.append(str(row["request_id"]))
    for row in access:
        if row.get("kind") != "access" or row.get("status") in ("denied", "cancelled"):
            continue
        if float(row.get("created_at") or 0) < filters.since:
            continue
        grant = (row.get("action") or {}).get("grant") or {}
        host, session = grant.get("host"), sessions.get(str(row.get("session")))
        if not isinstance(host, str) or not is_name(host) or session is None:
            continue
        workload, labels = session.get("workload"), session.get("labels") or {}
        if not filters.session_matches(workload, labels):
            continue
        ev = found.setdefault(host, Evidence(host))
        ev.access_requests += 1
        if isinstance(grant.get("port"), int):
            ev.ports[grant["port"]] += 1        # one for any port pins nothing: the denials show the ports used
        for method in grant.get("methods") or []:
            ev.methods[str(method)] += 1
        ev.scopes[str(row["session"])] = (workload, labels)
        ev.seen(float(row.get("created_at") or 0))
        if len(ev.access_ids) < MAX_IDS:
            ev.access_ids.append(str(row.get("id")))
    return found


def common_scope(scopes: Iterable[tuple[Any, Mapping[str, Any]]]) -> Scope:
    """The workload and the labels every one of these sessions had (the narrowest scope covering them all)."""
    workloads, shared = set(), None
    for workload, labels in scopes:
        workloads.add(workload)
        pairs = {(k, v) for k, v in (labels or {}).items() if isinstance(k, str) and isinstance(v, str)}
        shared = pairs if shared is None else shared & pairs
    workload = next(iter(workloads)) if len(workloads) == 1 else None
    return Scope(workload if workload in WORKLOADS else None, tuple(sorted(shared or ())))


def suggestions(found: Mapping[str, Evidence], filters: Filters) -> list[Suggestion]:
    """One suggestion per host seen at least `min_count` times, most seen first."""
    out = []
    for host, ev in sorted(found.items(), key=lambda kv: (-kv[1].count, kv[0])):
        if ev.count < max(1, filters.min_count):
            continue
        entry = f"{host}:{next(iter(ev.ports))}" if len(ev.ports) == 1 else host
        scope = common_scope(ev.scopes.values())
        out.append(Suggestion(host=host, entry=entry, scope=scope, evidence=ev))
    return out


# -- the proposed files -----------------------------------------------------------------------------------------

def data_file(existing: Mapping[str, str]) -> str:
    """Which data file the proposal edits: the scoped_allow file if the site has one, else the config data file,
    else a new scoped_allow file. `existing` maps relative paths to their text."""
    for path in DATA_FILES:
        if path in existing:
            return path
    return DATA_FILES[0]


def propose_data(path: str, text: str | None, found: Sequence[Suggestion]) -> str:
    """The data file's new text: each suggestion's entry added to the scoped_allow entry of its scope (a new
    entry when none has exactly that scope). ValueError when the file is not a JSON object."""
    doc: Any = json.loads(text) if text else ({} if path == DATA_FILES[1] else [])
    if path == DATA_FILES[0]:
        rules = doc
    else:
        if not isinstance(doc, dict) or not isinstance(doc.setdefault("egress", {}), dict):
            raise ValueError(f"{path}: not a JSON object with an egress object")
        rules = doc["egress"].setdefault("scoped_allow", [])
    if not isinstance(rules, list):
        raise ValueError(f"{path}: scoped_allow is not a list")
    for s in found:
        rule = next((r for r in rules if isinstance(r, dict) and _scope_of(r) == s.scope.entry_key()), None)
        if rule is None:
            rule = {"hosts": []}
            if s.scope.workload:
                rule["workload"] = s.scope.workload
            if s.scope.labels:
                rule["labels"] = dict(s.scope.labels)
            rules.append(rule)
        hosts = rule.setdefault("hosts", [])
        if isinstance(hosts, list) and s.entry not in hosts:
            hosts.append(s.entry)
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def _scope_of(rule: Mapping[str, Any]) -> tuple:
    labels = rule.get("labels") or {}
    pairs = tuple(sorted(labels.items())) if isinstance(labels, dict) else ("?",)
    return (rule.get("workload"), pairs)


def slug(host: str) -> str:
    return _SLUG.sub("_", host.lower()).strip("_")[:60] or "host"


def render_test(s: Suggestion, when: str) -> str:
    """The Rego test of one suggestion: allowed for a session in its scope (the CONNECT and a request like the
    ones denied); still denied outside it (another workload, each label changed or missing), on another port
    when the entry names one, and for another host."""
    name = slug(s.host)
    ev = s.evidence
    method = next((m for m, _ in ev.methods.most_common() if m not in ("CONNECT", "")), "GET")
    port = int(s.entry.rsplit(":", 1)[1]) if ":" in s.entry else (next(iter(ev.ports), 443))
    scheme = "http" if port == 80 else "https"
    labels = dict(s.scope.labels)
    session = {"id": "suggested", "workload": s.scope.workload or "ephemeral", "labels": labels,
               "frozen": False, "allow": [], "grants": []}
    outside: list[tuple[str, dict]] = []
    if s.scope.workload:
        other = "ephemeral" if s.scope.workload == "persistent" else "persistent"
        outside.append((f"workload_{other}", {**session, "workload": other}))
    for k, v in s.scope.labels:
        key = slug(k)
        outside.append((f"label_{key}_other", {**session, "labels": {**labels, k: v + "-other"}}))
        outside.append((f"label_{key}_missing", {**session, "labels": {x: y for x, y in labels.items() if x != k}}))
    j = _rego
    lines = [
        _comment(f"Proposed by `sandgate policy suggest` ({when}): allow {s.entry} for {s.scope.describe()}."),
        _comment(f"Evidence: {ev.denials} denials and {ev.access_requests} access requests from {len(ev.scopes)} "
                 "sessions."),
        "# These tests pass once the proposed scoped_allow entry is in data.sandgate.config.egress.",
        f"package site.suggested.allow_{name}_test",
        "",
        "import rego.v1",
        "",
        "import data.sandgate.egress",
        "",
        f"session := {j(session)}",
        "",
        f"inp(s, method, host, port, path, tunnel) := {{\"kind\": \"egress\", \"session\": s, \"request\": {{"
        f"\"method\": method, \"scheme\": {j(scheme)}, \"host\": host, \"port\": port, \"path\": path, "
        f"\"path_normalised\": path, \"query\": {{}}, \"headers\": {{}}, \"ip\": \"\", \"ip_class\": \"\", "
        f"\"secrets\": [], \"tunnel\": tunnel}}}}",
        "",
        "test_allowed_in_scope if {",
        f"\td := egress.decision with input as inp(session, \"CONNECT\", {j(s.host)}, {port}, \"\", false)",
        "\td.action == \"allow\"",
        f"\t{j(ALLOW_CODE)} in d.codes",
        f"\tr := egress.decision with input as inp(session, {j(method)}, {j(s.host)}, {port}, \"/\", true)",
        "\tr.action == \"allow\"",
        "}",
    ]
    for label, other in outside:
        lines += ["", f"test_denied_{label} if {{",
                  f"\td := egress.decision with input as inp({j(other)}, \"CONNECT\", {j(s.host)}, {port}, \"\", false)",
                  "\td.action == \"deny\"", "}"]
    if ":" in s.entry:
        other_port = 8443 if port != 8443 else 8444
        lines += ["", "test_denied_other_port if {",
                  f"\td := egress.decision with input as inp(session, \"CONNECT\", {j(s.host)}, {other_port}, \"\", false)",
                  "\td.action == \"deny\"", "}"]
    lines += ["", "test_denied_other_host if {",
              f"\td := egress.decision with input as inp(session, \"CONNECT\", \"suggested-other.invalid\", {port}, \"\", false)",
              "\td.action == \"deny\"", "}"]
    return "\n".join(lines) + "\n"


def _comment(text: str) -> str:
    """One Rego comment line: label values are the harness's text, so nothing in them may end the comment."""
    return "# " + "".join(c if c.isprintable() and c.isascii() else "?" for c in text)


def _rego(value: Any) -> str:
    """A JSON value as a Rego term (JSON is valid Rego for these: strings, numbers, booleans, objects, lists)."""
    return json.dumps(value, ensure_ascii=True, sort_keys=True)


def test_path(host: str) -> str:
    return f"{TEST_DIR}/{slug(host)}_test.rego"
