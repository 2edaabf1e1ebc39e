"""The API's request bodies as typed schemas: one validation layer for every body, and the source of the API part
of docs/reference.md (tests/test_reference.py fails when a field is undocumented).

A body is a JSON object. A field the endpoint does not know is refused (400 `unknown_field`, naming it: a
misspelt `"lables"` must not create a session without its labels); a field of the wrong type, or a required one
missing, is 400 `bad_request` with the field's own message. What a field's value means beyond its type (a host
pattern, a known secret, a range) stays with the parser that owns it (gateway/sessions/spec.py, ...).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from gateway.api.errors import ApiError
from gateway.approvals.access import GRANT_FIELDS
from gateway.config import BUDGET_KEYS
from gateway.sessions.spec import MAX_ALLOW, MAX_LABEL_KEY, MAX_LABEL_VALUE, MAX_LABELS, MAX_NAMES, MAX_PATH
from gateway.gates.toolcall import MAX_ARGS_BYTES

MAX_STEP = 2 ** 31 - 1                  # the store's INTEGER column
MAX_TOOLS = 1000
MAX_TEXTS = 10000
MAX_TOOL_NAME = 256                     # characters of a tool call's `tool` (held in its approval, history, audit)


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _nonempty_str(v: Any) -> bool:
    return isinstance(v, str) and bool(v)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _bool(v: Any) -> bool:
    return isinstance(v, bool)


def _object(v: Any) -> bool:
    return isinstance(v, dict)


def _str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _str_map(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items())


# type name (as the reference shows it) -> check
TYPES: dict[str, Callable[[Any], bool]] = {
    "string": _str, "non-empty string": _nonempty_str, "integer": _int, "boolean": _bool, "object": _object,
    "list of strings": _str_list, "object of strings": _str_map,
    "list of objects": lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v),
    "any": lambda v: True,
}


@dataclass(frozen=True)
class Field:
    type: str                            # a key of TYPES
    meaning: str
    required: bool = False
    problem: str = ""                    # the 400's detail when the value does not fit ("" -> NAME must be TYPE)
    check: Callable[[Any], bool] | None = None     # a further condition on a value of the right type
    keys: tuple[str, ...] = ()           # an object's known keys (of each object in a list of objects); () = any


@dataclass(frozen=True)
class Body:
    method: str
    path: str
    role: str                            # the least role that may call it
    meaning: str
    fields: Mapping[str, Field] = field(default_factory=dict)


def _article(type_name: str) -> str:
    return ("an " if type_name[:1] in "aeiou" else "a ") + type_name


def _unknown_key(name: str, spec: Field, value: Any) -> str | None:
    """`NAME.KEY` (`NAME[i].KEY` in a list) for the first key of `value` that `spec.keys` does not name, or None."""
    if isinstance(value, dict):
        for key in value:
            if key not in spec.keys:
                return f"{name}.{key}"
    elif isinstance(value, list):
        for i, item in enumerate(value):
            for key in item:
                if key not in spec.keys:
                    return f"{name}[{i}].{key}"
    return None


def check_body(body: Any, schema: Body) -> dict[str, Any]:
    """`body` as `schema` wants it: a JSON object of known fields of the right types. None counts as absent."""
    if not isinstance(body, dict):
        raise ApiError(400, "bad_request", "body must be a JSON object")
    unknown = [name for name in body if name not in schema.fields]
    if unknown:
        raise ApiError(400, "unknown_field", f"unknown field {unknown[0]!r} in the body of {schema.method} "
                                             f"{schema.path} (known: {', '.join(schema.fields)})"[:400])
    for name, spec in schema.fields.items():
        value = body.get(name)
        if value is None:
            if spec.required:
                raise ApiError(400, "bad_request", spec.problem or f"{name} is required ({spec.type})")
            continue
        if not TYPES[spec.type](value) or (spec.check is not None and not spec.check(value)):
            raise ApiError(400, "bad_request", spec.problem or f"{name} must be {_article(spec.type)}")
        if spec.keys:
            unknown_key = _unknown_key(name, spec, value)
            if unknown_key is not None:
                raise ApiError(400, "unknown_field", f"unknown field {unknown_key[:80]!r} in the body of "
                                                     f"{schema.method} {schema.path} (known in {name}: "
                                                     f"{', '.join(spec.keys)})")
    return body


class Checked:
    """A checked body: each field of its schema is an attribute (None when absent); `doc` is the JSON object
    itself, for the parsers that take one (gateway/sessions/spec.py, ...)."""

    __slots__ = ("doc", "_fields")

    def __init__(self, doc: dict[str, Any], schema: Body):
        self.doc = doc
        self._fields = schema.fields

    def __getattr__(self, name: str) -> Any:
        if name in self._fields:
            return self.doc.get(name)
        raise AttributeError(f"no field {name!r} in this body")

    def given(self) -> dict[str, Any]:
        """The fields the body sets (not None)."""
        return {k: v for k, v in self.doc.items() if v is not None}


def check_query(query: Mapping[str, str], known: Mapping[str, tuple[str, ...]], where: str) -> None:
    """A query of `known` parameters only (`?sesion=ID` must not list every session's rows), each of its listed
    values when `known` lists some: 400 `unknown_field` / `bad_request` naming the parameter."""
    for name, value in query.items():
        if name not in known:
            raise ApiError(400, "unknown_field", f"unknown query parameter {name[:80]!r} of {where} (known: "
                                                 f"{', '.join(known)})")
        if known[name] and value and value not in known[name]:
            raise ApiError(400, "bad_request", f"{name} must be one of {', '.join(known[name])}")


def read_body(body: Any, schema: Body) -> Checked:
    """`check_body`, its fields as attributes."""
    return Checked(check_body(body, schema), schema)


LABELS_CAP = (f"at most {MAX_LABELS}; a name at most {MAX_LABEL_KEY} characters, a value at most {MAX_LABEL_VALUE}")

CREATE_SESSION = Body("POST", "/v1/sessions", "harness", "create a session: its token, proxy URL, CA and env", {
    "workload": Field("string", "`ephemeral` (default ttl 1 h) or `persistent` (7 days)",
                      problem="workload must be 'ephemeral' or 'persistent'"),
    "labels": Field("object of strings", f"labels the policy sees as `input.session.labels` ({LABELS_CAP})",
                    problem="labels must be an object of strings"),
    "allow": Field("list of strings", "host patterns (`host`, `*.host`, `host:port`) the session may reach "
                                      f"beyond the policy's base allowlist (at most {MAX_ALLOW})",
                   problem="allow must be a list of host patterns"),
    "secrets": Field("list of strings", "configured secrets (`[secrets.NAME]`) whose placeholders the session "
                                        f"gets in its env (at most {MAX_NAMES} names)",
                     problem="secrets must be a list of names"),
    "databases": Field("list of strings", "configured databases (`[databases.NAME]`) whose URLs the session gets "
                                          f"in its env (at most {MAX_NAMES} names)",
                       problem="databases must be a list of names"),
    "ttl_s": Field("integer", "lifetime in seconds (default by workload, at most 30 days)"),
    "workspace": Field("string", f"the sandbox's workspace path (absolute, at most {MAX_PATH} characters; "
                                 "default `/workspace`)", problem="workspace must be an absolute path"),
    "ca_path": Field("string", f"where the sandbox finds the CA (absolute, at most {MAX_PATH} characters; default "
                               "`/etc/sandgate/ca.pem`)", problem="ca_path must be an absolute path"),
    "source": Field("string", "bind the session to this source IP address (transparent capture; inside "
                              "`proxy.transparent_sources`)", problem="source must be an IP address"),
    "budgets": Field("object", "the session's own budgets (`requests`, `bytes_out`, `bytes_in`, `toolcalls`, "
                               "`denials_per_10m`; 0 = none), within the workload's",
                     problem="budgets must be an object", keys=BUDGET_KEYS),
})

PATCH_SESSION = Body("PATCH", "/v1/sessions/{id}", "harness", "change a live session (at least one field)", {
    "frozen": Field("boolean", "a frozen session's requests and tool calls are denied",
                    problem="frozen must be a boolean"),
    "labels": Field("object of strings", f"replace the labels ({LABELS_CAP})",
                    problem="labels must be an object of strings"),
    "ttl_s": Field("integer", "renew: expire `ttl_s` seconds from now (never past the session's maximum "
                              "lifetime)", problem="ttl_s must be a positive integer"),
    "budgets": Field("object", "replace the budgets given (0 = none); the others stay",
                     problem="budgets must be an object", keys=BUDGET_KEYS),
})

TOOLCALL = Body("POST", "/v1/toolcalls", "harness", "ask before running a tool call: allow, deny or ask", {
    "session": Field("string", "the session id", required=True, problem="session and tool are required strings"),
    "tool": Field("non-empty string", f"the tool's name (`shell`, `sql`, an MCP tool, ...; at most {MAX_TOOL_NAME} "
                                      "characters)", required=True, problem="session and tool are required strings"),
    "args": Field("object", "the tool's arguments (`command` for shell, `query` for sql; at most "
                            f"{MAX_ARGS_BYTES // 1024} KiB as JSON: beyond, 413 `too_large`)",
                  problem="args must be an object"),
    "step": Field("integer", "the agent's step number (audited)", check=lambda v: 0 <= v <= MAX_STEP,
                  problem=f"step must be an integer from 0 to {MAX_STEP}"),
    "mcp": Field("object", "`{server, annotations}` for a tool of an MCP server (`input.mcp`)",
                 problem="mcp must be an object", keys=("server", "annotations")),
})

MCP_TOOLS = Body("POST", "/v1/mcp/tools", "harness", "which of an MCP server's tools the policy always denies", {
    "session": Field("string", "the session id"),
    "server": Field("string", "the MCP server's name"),
    "tools": Field("list of objects", f"the server's tools, each `{{name, annotations}}` (at most {MAX_TOOLS})",
                   required=True, check=lambda v: len(v) <= MAX_TOOLS,
                   problem=f"tools must be a list of at most {MAX_TOOLS} objects", keys=("name", "annotations")),
})

SCRUB = Body("POST", "/v1/sessions/{id}/scrub", "harness", "replace the session's real secret values in texts "
                                                           "by their placeholders", {
    "texts": Field("list of strings", f"the texts (at most {MAX_TEXTS})", required=True,
                   check=lambda v: len(v) <= MAX_TEXTS, problem=f"texts must be a list of at most {MAX_TEXTS} strings"),
})

DECIDE = Body("POST", "/v1/approvals/{id}/approve", "approver", "approve a pending approval (`/deny` takes the "
                                                                "same body)", {
    "reason": Field("string", "why (audited; required by some policies' approvals)",
                    problem="reason must be a string"),
    "grant": Field("object", "an access request only: `{methods?, path_prefix?, ttl_s?}` narrowing what approving "
                             "grants (never wider than asked)", problem="grant must be an object",
                   keys=tuple(sorted(GRANT_FIELDS))),
})

ACCESS_REQUEST = Body("POST", "/v1/sessions/{id}/access-requests", "harness",
                      "file an access request for the session (as the sandbox does at "
                      "`http://sandgate.internal/v1/access-requests`): 202 `{id, status}`; 409 with the pending one's "
                      "`id`", {
    "host": Field("non-empty string", "the host (a name or an IP literal; never resolved at filing)", required=True,
                  problem="host must be a host name or an IP address"),
    "port": Field("integer", "one port (default: any)"),
    "methods": Field("list of strings", "HTTP methods (default: DELETE GET HEAD OPTIONS PATCH POST PUT)"),
    "path_prefix": Field("string", "a path prefix matched at a segment boundary (default `/`)"),
    "reason": Field("non-empty string", "why the access is needed (shown to approvers, escaped)", required=True,
                    problem="reason is required: say why the access is needed"),
    "ttl_s": Field("any", "how long the grant lasts once approved (seconds; default 3600, at most "
                          "`approvals.max_grant_ttl_s`)"),
})

PUT_SECRET = Body("PUT", "/v1/secrets/{name}", "admin", "store a local secret (the `local:` backend)", {
    "value": Field("non-empty string", "the secret's value", required=True,
                   problem="value (a non-empty string) is required"),
    "hosts": Field("list of strings", "hosts it may be sent to", required=True, check=bool,
                   problem="hosts must be a non-empty list of host names"),
})

REVOKE = Body("POST", "/v1/revocations", "admin", "revoke a token by its id", {
    "jti": Field("string", "the token's id (`sandgate token` prints it)", required=True,
                 problem="jti (a token id) is required"),
})

BODIES: tuple[Body, ...] = (CREATE_SESSION, PATCH_SESSION, TOOLCALL, MCP_TOOLS, SCRUB, DECIDE, ACCESS_REQUEST,
                            PUT_SECRET, REVOKE)

# The endpoints that take no body (queries named in the meaning); with BODIES, every route of the API.
# tests/test_reference.py checks this list against the routes the server registers.
OTHER_ENDPOINTS: tuple[tuple[str, str, str, str], ...] = (          # (method, path, role, meaning)
    ("GET", "/v1/sessions", "harness", "the caller's sessions (an admin sees all); `?status=active|expired|deleted`"),
    ("GET", "/v1/sessions/{id}", "harness", "one session (never its token)"),
    ("DELETE", "/v1/sessions/{id}", "harness", "end a session: its token stops working at once"),
    ("DELETE", "/v1/sessions/{id}/grants/{approval}", "harness, approver", "withdraw an access grant at once "
                                                                          "(every replica)"),
    ("GET", "/v1/events", "harness, approver", "audit events, in order; `?session=ID&kind=KIND&limit=N`; "
                                               "`after=SEQ` and `wait=SECONDS` (long poll) need a session"),
    ("GET", "/v1/approvals", "harness, approver", "approvals; `?status=pending&session=ID&kind=egress|toolcall|access`"),
    ("GET", "/v1/approvals/{id}", "harness, approver", "one approval; `?wait=SECONDS` waits for its decision; a "
                                                       "harness reading `approved` uses it (once)"),
    ("POST", "/v1/approvals/{id}/deny", "approver", "deny a pending approval (the body of `/approve`)"),
    ("GET", "/v1/secrets", "admin", "the configured and local secrets (never their values)"),
    ("DELETE", "/v1/secrets/{name}", "admin", "remove a local secret"),
    ("GET", "/v1/revocations", "admin", "the revoked token ids"),
    ("GET", "/v1/decisions", "admin", "the decision log in OPA's decision-log format; `?since=&until=&kind=&session="
                                      "&id=&request_id=&limit=&after=` (pages: `next`)"),
    ("GET", "/healthz", "none", "liveness: `status` ok or degraded (audit rows cannot be written), policy "
                                "revision and health"),
    ("GET", "/readyz", "none", "readiness: 503 while new requests are refused (`audit.max_pending` rows wait) "
                               "or sandgate drains to stop (SIGTERM)"),
    ("GET", "/metrics", "none", "Prometheus metrics"),
)
