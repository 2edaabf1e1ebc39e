"""The package firewall's tables on real SQLite and real PostgreSQL: every write takes the next revision; a replica
reads only what is past its own; upserts replace, withdrawals stay as tombstones; two writers never share one
revision; and a replica's firewall takes a load in without a restart."""
from __future__ import annotations

import threading
import uuid

import pytest

from gateway.packages.firewall import PackageFirewall
from gateway.packages.osv import entries_of
from gateway.store import Store
from gateway.store.packages import PackageStore
from tests.conftest import need
from tests.support.pg import PG_URL, pg_available


@pytest.fixture(params=["sqlite", "postgresql"])
async def packages(request, tmp_path):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'sandgate.db'}"
    else:
        need(pg_available(), "PostgreSQL at 127.0.0.1:5432")
        url = PG_URL
    store = Store(url)
    await store.open()
    yield PackageStore(store)
    store.close()


def record(aid: str, name: str, versions: list[str], withdrawn: bool = False) -> dict:
    return {"id": aid, "summary": f"{aid} summary", **({"withdrawn": "2025-01-01T00:00:00Z"} if withdrawn else {}),
            "affected": [{"package": {"ecosystem": "PyPI", "name": name}, "versions": versions}]}


async def test_loads_and_exceptions_are_read_past_a_revision(packages):
    run = uuid.uuid4().hex[:8]
    before = await packages.revision()
    rows = [e.row() for r in (record(f"MAL-{run}-1", f"a{run}", ["1.0"]), record(f"MAL-{run}-2", f"b{run}", ["2.0"]))
            for e in entries_of(r)]
    rev, count = await packages.store.run(packages.put_entries_sync, rows)
    assert rev == before + 1 and count == 2
    again, entries, exceptions = await packages.changes(before)
    assert again == rev and {e[0] for e in entries} == {f"MAL-{run}-1", f"MAL-{run}-2"} and exceptions == []
    assert (await packages.changes(rev)) == (rev, [], [])
    # re-published with other versions, and withdrawn: the same rows, newer revisions
    (new,) = [e.row() for e in entries_of(record(f"MAL-{run}-1", f"a{run}", ["3.0"]))]
    (gone,) = [e.row() for e in entries_of(record(f"MAL-{run}-2", f"b{run}", ["2.0"], withdrawn=True))]
    rev2, _ = await packages.store.run(packages.put_entries_sync, [new, gone])
    _, entries, _ = await packages.changes(rev)
    assert sorted((e[0], e[6]) for e in entries) == [(f"MAL-{run}-1", False), (f"MAL-{run}-2", True)]
    assert '"3.0"' in [e for e in entries if e[0] == f"MAL-{run}-1"][0][3]
    rev3 = await packages.store.run(packages.put_exception_sync, "PyPI", f"a{run}", "3.0", "ok", "cli:t", 1.0)
    assert rev3 == rev2 + 1
    assert (await packages.changes(rev2))[2] == [("PyPI", f"a{run}", "3.0", False)]
    firewall = PackageFirewall(packages, {}, 1)
    await firewall.refresh()
    assert not firewall.advisories("PyPI", f"a{run}", "3.0")           # excepted
    assert not firewall.advisories("PyPI", f"b{run}", "2.0")           # withdrawn
    assert firewall.advisories("PyPI", f"A{run}", "3.0") == () and firewall.rev == rev3
    await packages.store.run(packages.put_exception_sync, "PyPI", f"a{run}", "3.0", "", "cli:t", 2.0, True)
    assert await firewall.refresh() and [a.id for a in firewall.advisories("PyPI", f"a{run}", "3.0")] == [f"MAL-{run}-1"]
    assert not await firewall.refresh()                                 # nothing new: nothing read


def test_two_writers_never_share_a_revision(packages):
    revs: list[int] = []
    errors: list[Exception] = []

    def write(i: int) -> None:
        try:
            for j in range(5):
                rows = [e.row() for e in entries_of(record(f"MAL-{uuid.uuid4().hex}", f"w{i}-{j}", ["1"]))]
                revs.append(packages.put_entries_sync(rows)[0])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=write, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(set(revs)) == len(revs) == 15
