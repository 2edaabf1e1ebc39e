"""Which AWS operation a request calls, from botocore's own service models.

`ServiceModels` loads a model once per service (a file read: callers load off the event loop, `load`, and then
`index` answers from memory). `operation_of` is pure: the JSON protocols name it in `X-Amz-Target`, the query
protocols in `Action` (query string or form body), the REST protocols by method, path template and the query keys
an operation requires (S3's `POST /{Bucket}?delete` is `DeleteObjects`; `PUT /{Bucket}/{Key+}` with `partNumber`
and `uploadId` is `UploadPart`). Unknown: "". `resource_of` gives what an approver is shown (bucket/key, ids).
"""
from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote

# signing name (credential scope) -> botocore's model name, where they differ
MODEL_OF = {"monitoring": "cloudwatch", "awsssoportal": "sso", "email": "ses", "states": "stepfunctions",
            "execute-api": "", "es": "opensearch", "aoss": "opensearchserverless", "cognito-sync": "cognito-sync",
            "mobiletargeting": "pinpoint", "elasticloadbalancing": "elbv2", "ecr-public": "ecr-public",
            "s3-object-lambda": "s3", "s3-outposts": "s3"}
QUERY_PROTOCOLS = frozenset({"query", "ec2"})
JSON_PROTOCOLS = frozenset({"json"})
MAX_FORM_BYTES = 1 << 20


@dataclass(frozen=True)
class RestOp:
    name: str
    method: str
    path: re.Pattern[str]
    query: tuple[tuple[str, str | None], ...]         # keys (and literal values) the operation requires
    literal: int                                      # literal characters in its path template
    headers: tuple[str, ...] = ()                     # header names (lower-case) it requires

    @property
    def rank(self) -> tuple[int, int, int]:
        return (len(self.query) + len(self.headers), self.literal, 0)


@dataclass(frozen=True)
class ServiceIndex:
    service: str                                      # the signing name
    protocol: str
    target_prefix: str = ""
    operations: frozenset[str] = frozenset()
    rest: tuple[RestOp, ...] = ()


def _template(uri: str) -> tuple[re.Pattern[str], tuple[tuple[str, str | None], ...], int]:
    path, _, query = uri.partition("?")
    pattern, literal = "", 0
    for piece in re.split(r"(\{[^}]+\})", path):
        if piece.startswith("{"):
            pattern += ".+" if piece.endswith("+}") else "[^/]+"
        else:
            pattern += re.escape(piece)
            literal += len(piece)
    keys = []
    for part in (p for p in query.split("&") if p):
        key, eq, value = part.partition("=")
        if key != "x-id":                            # names the operation for routing; optional on the wire
            keys.append((key, value if eq else None))
    return re.compile(pattern.rstrip("/") + "/?\\Z" if pattern != "/" else "/\\Z"), tuple(keys), literal


def build_index(service: str, model: Mapping) -> ServiceIndex:
    """The index of one botocore service model (pure)."""
    meta = model.get("metadata", {})
    protocol = meta.get("protocol", "")
    ops = model.get("operations", {})
    rest = []
    if protocol.startswith("rest"):
        shapes = model.get("shapes", {})
        for name, op in ops.items():
            http = op.get("http", {})
            pattern, keys, literal = _template(http.get("requestUri", "/"))
            shape = shapes.get(op.get("input", {}).get("shape", ""), {})
            required = set(shape.get("required", []))
            headers = []
            for member, spec in shape.get("members", {}).items():
                if member in required and spec.get("location") == "querystring":
                    keys += ((spec.get("locationName", member), None),)
                if member in required and spec.get("location") == "header":
                    headers.append(spec.get("locationName", member).lower())
            rest.append(RestOp(name, http.get("method", "GET").upper(), pattern, tuple(dict.fromkeys(keys)),
                               literal, tuple(headers)))
        rest.sort(key=lambda r: r.rank, reverse=True)
    return ServiceIndex(service=service, protocol=protocol, target_prefix=meta.get("targetPrefix", ""),
                        operations=frozenset(ops), rest=tuple(rest))


class ServiceModels:
    """botocore's service models, each loaded once (blocking: call `load` off the loop). botocore itself is
    imported by the first `load` (start-up time: most gateways never see an AWS request)."""

    def __init__(self) -> None:
        self._loader: Any = None
        self._indexes: dict[str, ServiceIndex | None] = {}
        self._lock = threading.Lock()

    def index(self, service: str) -> ServiceIndex | None:
        """The loaded index (None when not loaded yet or there is no model)."""
        return self._indexes.get(service)

    def loaded(self, service: str) -> bool:
        return service in self._indexes

    def load(self, service: str) -> ServiceIndex | None:
        with self._lock:
            if service not in self._indexes:
                name = MODEL_OF.get(service, service)
                if self._loader is None and name:
                    import botocore.loaders

                    self._loader = botocore.loaders.create_loader()
                try:
                    model = self._loader.load_service_model(name, "service-2") if name else None
                except Exception:  # noqa: BLE001 - no such model (DataNotFoundError, UnknownServiceError)
                    model = None
                self._indexes[service] = build_index(service, model) if model else None
            return self._indexes[service]


@dataclass(frozen=True)
class Call:
    """A request to AWS as the operation resolver sees it."""

    service: str
    method: str
    host: str
    path: str                                          # raw, without the query
    query: tuple[tuple[str, str], ...]                 # decoded
    headers: Mapping[str, str] = field(default_factory=dict)   # lower-case names
    body: bytes | None = None                          # None when it was not held


def s3_path(host: str, path: str) -> str:
    """A virtual-host S3 request's path in path style ("bucket.s3.amazonaws.com" + "/key" -> "/bucket/key")."""
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host
    match = re.match(r"(.+?)\.s3[.-]", name)
    if match and not name.startswith(("s3.", "s3-")):
        return "/" + match.group(1) + (path if path.startswith("/") else "/" + path)
    return path


def form_params(call: Call) -> dict[str, str]:
    params = dict(call.query)
    ctype = call.headers.get("content-type", "")
    if call.body and "application/x-www-form-urlencoded" in ctype and len(call.body) <= MAX_FORM_BYTES:
        params |= dict(parse_qsl(call.body.decode("utf-8", "replace"), keep_blank_values=True))
    return params


def ambiguous(call: Call, multi_headers: Sequence[str] = ()) -> bool:
    """Whether the call names its operation more than one way (an `Action` in both the query and the body, or twice
    with different values; `X-Amz-Target` twice): a server might read the other one, so it is refused."""
    if "x-amz-target" in multi_headers:
        return True
    actions = {v for k, v in call.query if k == "Action"}
    ctype = call.headers.get("content-type", "")
    if call.body and "application/x-www-form-urlencoded" in ctype and len(call.body) <= MAX_FORM_BYTES:
        actions |= {v for k, v in parse_qsl(call.body.decode("utf-8", "replace"), keep_blank_values=True)
                    if k == "Action"}
    return len(actions) > 1


def needs_body(index: ServiceIndex | None, method: str, headers: Mapping[str, str]) -> bool:
    """Whether the operation may be named only in the body (a query protocol's form POST)."""
    return index is not None and index.protocol in QUERY_PROTOCOLS and method == "POST" and \
        "application/x-www-form-urlencoded" in headers.get("content-type", "")


def operation_of(index: ServiceIndex | None, call: Call) -> str:
    """botocore's name of the operation `call` calls; "" when unknown."""
    if index is None:
        return ""
    if index.protocol in JSON_PROTOCOLS:
        target = call.headers.get("x-amz-target", "")
        prefix, _, name = target.rpartition(".")
        return name if name in index.operations and (not index.target_prefix or prefix == index.target_prefix) \
            else ""
    if index.protocol in QUERY_PROTOCOLS:
        name = form_params(call).get("Action", "")
        return name if name in index.operations else ""
    path = unquote(s3_path(call.host, call.path) if index.service in ("s3", "s3-object-lambda") else call.path)
    keys = dict(call.query)
    for op in index.rest:
        if op.method == call.method and op.path.match(path) and all(
                k in keys and (v is None or keys[k] == v) for k, v in op.query) and all(
                h in call.headers for h in op.headers):
            return op.name
    return ""


_RESOURCE_KEYS = re.compile(r"(?:^|\.)(?:[A-Za-z]*(?:Id|Ids|Name|Names|Arn|Arns)|Bucket|Key)(?:\.\d+)?(?:\.member\.\d+)?\Z")


def resource_of(index: ServiceIndex | None, call: Call) -> str:
    """What the call acts on, for people: S3's bucket/key, else the ids, names and ARNs it names."""
    if index is None:
        return ""
    if index.protocol.startswith("rest"):
        path = unquote(s3_path(call.host, call.path) if index.service == "s3" else call.path)
        return path.lstrip("/")[:300]
    params: Sequence[tuple[str, str]] = ()
    if index.protocol in QUERY_PROTOCOLS:
        params = [(k, v) for k, v in form_params(call).items() if k not in ("Action", "Version")]
    elif call.body:
        try:
            doc = json.loads(call.body)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            params = [(k, v if isinstance(v, str) else json.dumps(v)) for k, v in doc.items()]
    picked = [v for k, v in params if _RESOURCE_KEYS.search(k)]
    return ", ".join(picked)[:300]
