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
