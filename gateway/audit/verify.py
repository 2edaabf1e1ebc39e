"""`sandgate audit verify`: the whole trail checked against its chain and its signed checkpoints.

Checkpoint signatures first (each with a key given: the data dir's, or `--pubkey FILE`), then every row in id
order (chain.check_rows: the first row edited, deleted before, inserted or reordered is named with its id,
session and seq), then the tail: a trail that ends before the chain head's count or before the last signed
checkpoint had rows cut from its end. Runs on one store thread; 100k rows take a few seconds.
"""
from __future__ import annotations

from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gateway.audit.checkpoints import signature_ok
from gateway.store.chain import Problem, Walk, check_rows
from gateway.store.trail import TrailStore


@dataclass
class Verdict:
    ok: bool
    checked: int
    signed: int                 # signed checkpoints verified
    last_signed_id: int         # the last row a signed checkpoint covers (0: none)
    unsealed: int               # rows after the last signed checkpoint
    problem: str = ""


def verify_trail(trail: TrailStore, keys: list[Ed25519PublicKey]) -> Verdict:
    points = trail.checkpoints_sync()
    signed = [p for p in points if p.kind != "genesis"]
    for point in signed:
        if not signature_ok(point, keys):
            return Verdict(False, 0, 0, 0, 0, f"the checkpoint at chain place {point.count} (row id {point.last_id}) "
                                              f"has no valid signature by the key{'s' if len(keys) > 1 else ''} "
                                              "given: forged or edited")
    for point in points:
        if point.kind == "genesis" and point is not points[0]:
            return Verdict(False, 0, 0, 0, 0, f"a second genesis checkpoint at chain place {point.count}: inserted")
    walk = check_rows(trail.rows_sync(), Walk(), {p.count: p for p in points})
    last_signed = signed[-1] if signed else None
    verdict = Verdict(True, walk.checked, len(signed), last_signed.last_id if last_signed else 0,
                      walk.last_n - (last_signed.count if last_signed else 0))
    if walk.problem is not None:
        return _broken(verdict, walk.problem)
    count, _last_id, head_hash = trail.head_sync()

    def tail(what: str) -> Verdict:
        return _broken(verdict, Problem(walk.last_id or None, walk.last_session, walk.last_seq, what))
    if last_signed is not None and walk.last_n < last_signed.count:
        return tail(f"rows cut from the end after it: the last signed checkpoint covers {last_signed.count} rows "
                    f"(to row id {last_signed.last_id}), the trail has {walk.last_n}")
    if walk.last_n < count:
        return tail(f"rows cut from the end after it: the chain head counts {count} rows, the trail has {walk.last_n}")
    if walk.last_n == count and count and head_hash != walk.last_hash:
        return tail("the chain head names another hash for the last row (the head or the tail was rewritten)")
    if walk.last_n > count:
        return tail(f"more rows than the chain head counts ({count}): rows appended outside sandgate")
    return verdict


def _broken(verdict: Verdict, problem: Problem) -> Verdict:
    verdict.ok = False
    verdict.problem = problem.line()
    return verdict
