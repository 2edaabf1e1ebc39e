"""When an approved, unused item may let an identical action through again (pure)."""
from __future__ import annotations

import pytest

from gateway.approvals.rules import reusable
from gateway.store.records import Approval, Session

NOW = 1_900_000_000.0
LIVE = Session(id="s1", workload="ephemeral", created_at=NOW - 100, expires_at=NOW + 100, frozen=False)


def row(**kw):
    return Approval(**{"id": "a1", "session": "s1", "kind": "toolcall", "binding": "b", "created_at": NOW - 20,
                       "expires_at": NOW + 100, "status": "approved", "used_at": None, "decided_at": NOW - 10, **kw})


@pytest.mark.parametrize("item, session, window, ok", [
    (row(), LIVE, 600, True),
    (row(decided_at=NOW - 600), LIVE, 600, True),
    (row(decided_at=NOW - 601), LIVE, 600, False),        # past the reuse window
    (row(), LIVE, 0, False),
    (row(used_at=NOW - 1), LIVE, 600, False),             # used once already
    (row(status="pending"), LIVE, 600, False),
    (row(status="denied"), LIVE, 600, False),
    (row(decided_at=None), LIVE, 600, False),
    (row(), LIVE.replace(frozen=True), 600, False),       # never after a freeze
    (row(), None, 600, False),                            # never after the session ended
])
def test_reusable(item, session, window, ok):
    assert reusable(item, session, NOW, window) is ok
