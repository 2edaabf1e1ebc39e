"""The decision cache is bounded: a session making ever new inputs (distinct URLs, arguments) cannot grow it."""
from __future__ import annotations

from gateway.policy.base import DecisionCache
from gateway.policy.decision import deny


def test_decision_cache_never_passes_its_size():
    cache = DecisionCache(size=3)
    cache.enabled = True
    cache.set_reads(frozenset({("request", "path")}))
    keys = [cache.key("egress", {"request": {"path": f"/{i}"}}) for i in range(50)]
    assert len(set(keys)) == 50
    for i, key in enumerate(keys):
        cache.put(key, deny("x", str(i)))
        assert len(cache._items) <= 3
    assert cache.get(keys[0]) is None and cache.get(keys[-1]).reasons == ("49",)
    assert DecisionCache().size == 4096


def test_decision_cache_never_passes_its_characters():
    """Keys hold what the policy reads (a tool call's arguments among it): big distinct inputs cannot make the
    cache keep more than `max_chars` of keys, however few entries that is, and one key larger than an eighth
    of it is not kept at all."""
    cache = DecisionCache(size=4096, max_chars=1_000_000)
    cache.enabled = True
    cache.set_reads(frozenset({("tool", "args")}))
    big = [cache.key("toolcall", {"tool": {"args": {"query": f"select {i} -- " + "x" * 60_000}}}) for i in range(100)]
    assert len(set(big)) == 100 and all(len(k) > 60_000 for k in big)
    for i, key in enumerate(big):
        cache.put(key, deny("x", str(i)))
        assert cache.chars == sum(len(k) for k in cache._items) <= 1_000_000
    assert 10 <= len(cache._items) < 17
    assert cache.get(big[-1]).reasons == ("99",) and cache.get(big[0]) is None
    huge = cache.key("toolcall", {"tool": {"args": {"query": "y" * 200_000}}})
    cache.put(huge, deny("x", "huge"))
    assert cache.get(huge) is None and cache.chars <= 1_000_000
    small = [cache.key("toolcall", {"tool": {"args": {"n": i}}}) for i in range(50)]
    for key in small:
        cache.put(key, deny("x", "small"))
    assert all(cache.get(k) is not None for k in small)       # small keys still fill it by count
    cache.set_reads(frozenset({("tool", "args")}))            # a reload empties it, and its count
    assert cache.chars == 0 and not cache._items
    assert DecisionCache().max_chars == 32 * 1024 * 1024
