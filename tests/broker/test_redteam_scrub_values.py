"""Red team, broker: the values a session's responses are scrubbed with when the store stops answering. The
environment backend is real (a dict it reads); the store "goes down" by losing the variable."""
from __future__ import annotations

import pytest

from broker.backends import CachedResolver, EnvBackend, SecretUnavailable
from broker.broker import Broker, parse_secret_specs
from gateway.net.hosts import normalise_host


def broker(environ: dict) -> Broker:
    specs = parse_secret_specs({"a": {"source": "env:A", "hosts": ["a.test"]},
                                "b": {"source": "env:B", "hosts": ["b.test"]}}, normalise_host)
    return Broker(specs, CachedResolver({"env": EnvBackend(environ)}, ttl_s=0), normalise_host=normalise_host)


async def test_scrubbing_falls_back_to_the_last_value_read_and_injection_does_not():
    environ = {"A": "real-a-value-0123", "B": "real-b-value-4567"}
    br = broker(environ)
    placeholders = {"a": "PH-A-xxxxxxxxxxxx", "b": "PH-B-yyyyyyyyyyyy", "gone": "PH-GONE"}
    assert await br.scrub_replacements(placeholders) == {b"real-a-value-0123": b"PH-A-xxxxxxxxxxxx",
                                                         b"real-b-value-4567": b"PH-B-yyyyyyyyyyyy"}
    environ.clear()                                       # the store is down
    assert await br.scrub_replacements(placeholders) == {b"real-a-value-0123": b"PH-A-xxxxxxxxxxxx",
                                                         b"real-b-value-4567": b"PH-B-yyyyyyyyyyyy"}
    with pytest.raises(SecretUnavailable):
        await br.bindings({"a": placeholders["a"]})       # a stale value is never injected


async def test_no_value_ever_read_means_no_scrubbing_and_a_refusal():
    br = broker({"B": "real-b-value-4567"})
    with pytest.raises(SecretUnavailable):
        await br.scrub_replacements({"a": "PH-A-xxxxxxxxxxxx", "b": "PH-B-yyyyyyyyyyyy"})
