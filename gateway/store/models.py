"""Tables: sessions, approvals, audit events, session paths. Plain SQL types so SQLite and PostgreSQL both work."""
from __future__ import annotations

from typing import Any, Optional

from sqlalchemy import JSON, BigInteger, Column, Index, Text
from sqlmodel import Field, SQLModel


class SessionRow(SQLModel, table=True):
    __tablename__ = "sessions"
    id: str = Field(primary_key=True)
    workload: str
    labels: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    allow: list = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    secrets: list = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    placeholders: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    workspace: str = "/workspace"
    ca_path: str = "/etc/sandgate/ca.pem"
    frozen: bool = False
    created_at: float
    expires_at: float
    deleted_at: Optional[float] = None
    created_by: str = ""
    updated_at: float = 0.0            # every change sets it; replicas take the newer row
    databases: list = Field(default_factory=list, sa_column=Column(JSON, nullable=False, server_default="[]"))
    # the PostgreSQL gateway's SCRAM-SHA-256 verifier of the session's database password (never the password)
    db_login: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False, server_default="{}"))
    # the session's own budgets (gateway/sessions/budgets.py): keys set by POST or PATCH, over its workload's
    budgets: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False, server_default="{}"))


class ApprovalRow(SQLModel, table=True):
    __tablename__ = "approvals"
    __table_args__ = (Index("ix_approvals_binding", "binding"), Index("ix_approvals_session", "session"),
                      Index("ix_approvals_status", "status"))
    id: str = Field(primary_key=True)
    session: str
    kind: str
    status: str = "pending"
    binding: str
    summary: str = ""
    action: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    reasons: list = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    created_at: float
    expires_at: float
    decided_at: Optional[float] = None
    decided_by: Optional[str] = None
    reason: Optional[str] = None
    votes: list = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    quorum: int = 1
    used_at: Optional[float] = None
    requested_by: str = ""
    version: int = 0


class AuditEventRow(SQLModel, table=True):
    __tablename__ = "events"
    __table_args__ = (Index("ix_events_session_seq", "session", "seq"),)
    id: Optional[int] = Field(default=None, primary_key=True)
    seq: int = 0
    ts: float
    session: Optional[str] = None
    step: Optional[int] = None
    kind: str
    action: str = ""
    reasons: list = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    codes: list = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    request_id: Optional[str] = None
    method: Optional[str] = None
    host: Optional[str] = None
    path: Optional[str] = None
    http_status: Optional[int] = None
    bytes_in: Optional[int] = None
    bytes_out: Optional[int] = None
    policy_rev: Optional[str] = None
    detail: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    chain_n: Optional[int] = Field(default=None, sa_column=Column(BigInteger, nullable=True))  # place in the chain
    hash: Optional[str] = None         # SHA-256 of the previous row's hash and this row (gateway/store/chain.py)


class AuditChainRow(SQLModel, table=True):
    """One row (id 1): the chain's head (rows chained, last row id, its hash). Every audit batch locks it first:
    one chain over all rows, in id order, across replicas."""
    __tablename__ = "audit_chain"
    id: int = Field(primary_key=True)
    count: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    last_id: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    hash: str


class AuditCheckpointRow(SQLModel, table=True):
    """A signed point of the chain (Ed25519 over chain.checkpoint_message); the migration's genesis checkpoint,
    sealing the rows from before the chain, has no signature."""
    __tablename__ = "audit_checkpoints"
    id: Optional[int] = Field(default=None, primary_key=True)
    count: int = Field(sa_column=Column(BigInteger, nullable=False, unique=True))
    last_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    hash: str
    ts: float
    key_id: str = ""
    signature: str = Field(default="", sa_column=Column(Text, nullable=False))
    kind: str = "signed"


class AuditSeqRow(SQLModel, table=True):
    """The last audit sequence number given out per session ("" for events of no session). A writer takes the
    next numbers with one UPDATE ... RETURNING in the transaction that inserts the events: the row lock orders
    writers (replicas) and a rolled-back batch gives its numbers back, so each session's trail is gap-free."""
    __tablename__ = "audit_seqs"
    session: str = Field(primary_key=True)
    last: int = 0


class SessionStatsRow(SQLModel, table=True):
    """A session's counters summed over every replica (policies read them as `session.stats`). Each replica adds
    what it counted about once a second (an upsert that adds), then reads the totals back."""
    __tablename__ = "session_stats"
    session: str = Field(primary_key=True)
    requests: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    denied: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    asked: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    bytes_out: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    bytes_in: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    toolcalls: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))


class RevocationRow(SQLModel, table=True):
    """A revoked token id. `id` only grows: replicas poll for rows above the last one they saw."""
    __tablename__ = "revocations"
    id: Optional[int] = Field(default=None, primary_key=True)
    jti: str = Field(index=True, unique=True)
    revoked_at: float
    revoked_by: str = ""


class SessionPathRow(SQLModel, table=True):
    """What a session's tool calls left behind: a symbolic link (path -> target) or a written file (its
    content when the call showed it). Later rows for the same path replace earlier ones."""
    __tablename__ = "session_paths"
    __table_args__ = (Index("ix_session_paths_session", "session", "id"),)
    id: Optional[int] = Field(default=None, primary_key=True)
    session: str
    path: str
    kind: str                          # "link" or "file"
    target: Optional[str] = None       # a link's target (None: only known at run time)
    content: Optional[str] = Field(default=None, sa_column=Column(Text, nullable=True))  # None: not visible
    ts: float = 0.0


def row_dict(row: Any) -> dict:
    return {k: getattr(row, k) for k in row.__class__.model_fields}
