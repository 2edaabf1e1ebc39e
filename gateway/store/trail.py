"""Reading and sealing the audit chain (chain.py) in the store: the head, checkpoints, rows in id order."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

from gateway.store.bulk import placeholder
from gateway.store.chain import Checkpoint

if TYPE_CHECKING:
    from gateway.store.store import Store

ROW_COLS = ("id", "chain_n", "hash", "seq", "ts", "session", "step", "kind", "action", "reasons", "codes",
            "request_id", "method", "host", "path", "http_status", "bytes_in", "bytes_out", "policy_rev", "detail")
JSON_COLS = ("reasons", "codes", "detail")


def select_cols(dialect: str) -> list[str]:
    """ROW_COLS as a SELECT list: JSON columns as their stored text (PostgreSQL's driver would parse them)."""
    return [f"CAST({c} AS TEXT) AS {c}" if c in JSON_COLS and dialect == "postgresql" else c for c in ROW_COLS]


CHECKPOINT_COLS = ("count", "last_id", "hash", "ts", "key_id", "signature", "kind")


class TrailStore:
    def __init__(self, store: Store):
        self.store = store

    def head_sync(self) -> tuple[int, int, str]:
        """(rows chained, last row id, its hash)."""
        rows = self.store.driver_rows("SELECT count, last_id, hash FROM audit_chain WHERE id = 1", ())
        count, last_id, chain_hash = rows[0]
        return int(count), int(last_id), str(chain_hash)

    def checkpoints_sync(self) -> list[Checkpoint]:
        rows = self.store.driver_rows(f"SELECT {', '.join(CHECKPOINT_COLS)} FROM audit_checkpoints ORDER BY count",
                                       ())
        return [Checkpoint(int(c), int(i), h, float(t), k or "", s or "", kind) for c, i, h, t, k, s, kind in rows]

    def put_checkpoint_sync(self, point: Checkpoint) -> bool:
        """Insert a checkpoint; False when one at that place exists already (another replica's)."""
        mark = placeholder(self.store.engine.dialect.paramstyle)
        sql = (f"INSERT INTO audit_checkpoints ({', '.join(CHECKPOINT_COLS)}) VALUES ({', '.join([mark] * 7)}) "
               "ON CONFLICT (count) DO NOTHING")

        def work(cur: Any) -> int:
            cur.execute(sql, (point.count, point.last_id, point.hash, point.ts, point.key_id, point.signature,
                              point.kind))
            return cur.rowcount
        return self.store.driver(work, commit=True) == 1

    def rows_sync(self, after_id: int = 0, chunk: int = 5000) -> Iterator[dict]:
        """Every event row past `after_id`, in id order, read a chunk at a time (a generator: call it on one
        thread and consume it there)."""
        mark = placeholder(self.store.engine.dialect.paramstyle)
        sql = f"SELECT {', '.join(select_cols(self.store.engine.dialect.name))} FROM events WHERE id > {mark} " \
              f"ORDER BY id LIMIT {int(chunk)}"
        last = after_id
        while True:
            fetched = self.store.driver_rows(sql, (last,))
            for values in fetched:
                yield dict(zip(ROW_COLS, values))
            if len(fetched) < chunk:
                return
            last = fetched[-1][0]
