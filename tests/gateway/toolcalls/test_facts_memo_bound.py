"""The facts memo is bounded by entries and by the characters its keys hold: a session sending ever new large
arguments (statements, commands up to the gate's 256 KiB) cannot make it keep more than `max_chars`."""
from __future__ import annotations

from gateway.toolcalls.describe import Effects
from gateway.toolcalls.memo import MAX_CHARS, FactsMemo


def test_facts_memo_never_passes_its_characters():
    memo = FactsMemo(size=4096, max_chars=1_000_000)
    keys = [FactsMemo.key("sql", '{"query": "select %d -- %s"}' % (i, "x" * 60_000), "/w", {}, {}, None)
            for i in range(100)]
    for i, key in enumerate(keys):
        memo.put(key, {"n": i}, Effects())
        assert memo.chars <= 1_000_000
        assert memo.chars == sum(len(k[1]) + len(k[2]) for k in memo._items)
        assert memo._costs.keys() == memo._items.keys()
    assert 10 <= len(memo._items) < 17
    assert memo.get(keys[-1])[0] == {"n": 99} and memo.get(keys[0]) is None
    # the session's file contents count too, and a key larger than an eighth of the budget is not kept
    files = {"/w/big.sql": "z" * 200_000}
    huge = FactsMemo.key("shell", '{"command": "psql -f big.sql"}', "/w", {}, files, None)
    memo.put(huge, {"n": "huge"}, Effects())
    assert memo.get(huge) is None and memo.chars <= 1_000_000
    # replacing an entry does not count it twice
    memo.put(keys[-1], {"n": "again"}, Effects())
    assert memo.chars == sum(len(k[1]) + len(k[2]) for k in memo._items)
    assert memo.get(keys[-1])[0] == {"n": "again"}


def test_facts_memo_still_bounded_by_count():
    memo = FactsMemo(size=3)
    keys = [FactsMemo.key("shell", '{"command": "echo %d"}' % i, "/w", {}, {}, None) for i in range(50)]
    for key in keys:
        memo.put(key, {}, Effects())
        assert len(memo._items) <= 3
    assert memo.get(keys[0]) is None and memo.get(keys[-1]) is not None
    assert FactsMemo().size == 4096 and FactsMemo().max_chars == MAX_CHARS == 32 * 1024 * 1024
