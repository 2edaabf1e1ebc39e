"""The store's domain records: what it returns, and what services pass around instead of `dict` rows.

Frozen dataclasses of plain values (stdlib only: pure cores may read them too). A record's JSON columns stay
JSON values (`labels`, `action`, `votes`... as the API and the policy input show them); `to_json()` is the
record as one JSON object, for the edges (API responses, policy input builders, the decision log).

A record is also a read-only mapping of its fields (`record["id"]`, `record.get("labels")`, `{**record}`), for
the code that still reads rows by key; new code uses the attributes.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, ClassVar, Iterator, Optional, TypeVar

R = TypeVar("R", bound="Record")


class Record:
    """The base of the records: the fields as a read-only mapping, `to_json`, `replace`."""

    __slots__ = ()
    FIELDS: ClassVar[tuple[str, ...]] = ()
    _names: ClassVar[frozenset[str]] = frozenset()
    _values: ClassVar[Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        Mapping.register(cls)

    @classmethod
    def _seal(cls) -> None:
        """After @dataclass: the field names, and one getter of all their values."""
        cls.FIELDS = tuple(f.name for f in dataclasses.fields(cls))      # type: ignore[arg-type]
        cls._names = frozenset(cls.FIELDS)
        cls._values = attrgetter(*cls.FIELDS)

    @classmethod
    def from_row(cls: type[R], row: Mapping[str, Any]) -> R:
        """The record of a row (a dict of columns); columns the record does not know are left out."""
        return cls(**{k: row[k] for k in cls.FIELDS if k in row})

    def to_json(self) -> dict[str, Any]:
        return dict(zip(self.FIELDS, self._values(self)))

    def replace(self: R, **changes: Any) -> R:
        return dataclasses.replace(self, **changes)          # type: ignore[type-var]

    # -- the read-only mapping view ----------------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        if key not in self._names:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self._names else default

    def keys(self) -> tuple[str, ...]:
        return self.FIELDS

    def values(self) -> tuple[Any, ...]:
        return self._values(self)

    def items(self) -> Iterator[tuple[str, Any]]:
        return zip(self.FIELDS, self._values(self))

    def __iter__(self) -> Iterator[str]:
        return iter(self.FIELDS)

    def __len__(self) -> int:
        return len(self.FIELDS)

    def __contains__(self, key: object) -> bool:
        return key in self._names

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values(self) == self._values(other)
        if isinstance(other, Mapping):
            return self.to_json() == dict(other)
        return NotImplemented

    __hash__ = None       # type: ignore[assignment]  # JSON values inside: not hashable


@dataclass(frozen=True, slots=True, eq=False, kw_only=True)
class Session(Record):
    """A session (the `sessions` table; the fields in its columns' order)."""

    id: str
    workload: str
    labels: dict = dataclasses.field(default_factory=dict)
    allow: list = dataclasses.field(default_factory=list)
    secrets: list = dataclasses.field(default_factory=list)
    placeholders: dict = dataclasses.field(default_factory=dict)
    workspace: str = "/workspace"
    ca_path: str = "/etc/sandgate/ca.pem"
    frozen: bool = False
    created_at: float
    expires_at: float
    deleted_at: Optional[float] = None
    created_by: str = ""
    updated_at: float = 0.0
    databases: list = dataclasses.field(default_factory=list)
    db_login: dict = dataclasses.field(default_factory=dict)   # the PostgreSQL gateway's SCRAM verifier
    budgets: dict = dataclasses.field(default_factory=dict)    # the session's own budgets (over its workload's)


@dataclass(frozen=True, slots=True, kw_only=True)
class Vote:
    """One approver's vote on an approval (an item of `Approval.votes`, as the record's `ballots`)."""

    by: str
    verdict: str                         # "approve" | "deny"
    at: Optional[float] = None
    reason: str = ""
    grant: Optional[dict] = None         # an access approval's narrowing

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> "Vote":
        return cls(by=doc["by"], verdict=doc["verdict"], at=doc.get("at"), reason=doc.get("reason", ""),
                   grant=doc.get("grant"))


@dataclass(frozen=True, slots=True, eq=False, kw_only=True)
class Approval(Record):
    """An approval item (the `approvals` table): a tool call, a held egress request or an access request."""

    id: str
    session: str
    kind: str                            # "toolcall" | "egress" | "access"
    status: str = "pending"
    binding: str
    summary: str = ""
    action: dict = dataclasses.field(default_factory=dict)
    reasons: list = dataclasses.field(default_factory=list)
    created_at: float
    expires_at: float
    decided_at: Optional[float] = None
    decided_by: Optional[str] = None
    reason: Optional[str] = None
    votes: list = dataclasses.field(default_factory=list)      # JSON: {"by", "verdict", "at", "reason", "grant"?}
    quorum: int = 1
    used_at: Optional[float] = None
    requested_by: str = ""
    version: int = 0

    @property
    def ballots(self) -> tuple[Vote, ...]:
        """The votes as records."""
        return tuple(Vote.of(v) for v in self.votes)


@dataclass(frozen=True, slots=True, eq=False, kw_only=True)
class AuditEvent(Record):
    """An audit event as read back (the `events` table, without its chain columns)."""

    id: Optional[int] = None
    seq: int = 0
    ts: float
    session: Optional[str] = None
    step: Optional[int] = None
    kind: str
    action: str = ""
    reasons: list = dataclasses.field(default_factory=list)
    codes: list = dataclasses.field(default_factory=list)
    request_id: Optional[str] = None
    method: Optional[str] = None
    host: Optional[str] = None
    path: Optional[str] = None
    http_status: Optional[int] = None
    bytes_in: Optional[int] = None
    bytes_out: Optional[int] = None
    policy_rev: Optional[str] = None
    detail: dict = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True, eq=False, kw_only=True)
class ToolCallRecord(Record):
    """A session's recorded tool call as its later calls read it (an audit event of kind `toolcall`)."""

    id: Optional[int] = None
    seq: int = 0
    ts: float
    session: Optional[str] = None
    step: Optional[int] = None
    kind: str = "toolcall"
    action: str = ""
    codes: list = dataclasses.field(default_factory=list)
    request_id: Optional[str] = None
    detail: dict = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True, eq=False, kw_only=True)
class Revocation(Record):
    """A revoked token id (the `revocations` table)."""

    id: Optional[int] = None
    jti: str
    revoked_at: float
    revoked_by: str = ""


for _cls in (Session, Approval, AuditEvent, ToolCallRecord, Revocation):
    _cls._seal()
