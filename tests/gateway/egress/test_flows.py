"""flows.chain: stream filters run one after the other, the end of the stream (b"") reaching the second."""
from __future__ import annotations

from broker.scrub import StreamScrubber
from gateway.egress.flows import chain


def test_the_end_reaches_the_second_filter_when_the_first_returns_pieces():
    body = b"the secret-value is here"
    held = chain(lambda chunk: [] if chunk else [body], StreamScrubber({b"secret-value": b"placeholder!"}))
    assert held(b"dropped 401 body") == []
    assert b"".join(held(b"")) == b"the placeholder! is here"


def test_no_empty_piece_is_ever_sent_mid_stream():
    counted = chain(lambda chunk: [chunk, b""], lambda piece: piece)
    assert counted(b"abc") == [b"abc"]
    assert counted(b"") == []


def test_bytes_from_the_first_filter_pass_straight_through():
    scrub = StreamScrubber({b"secret-value": b"placeholder!"})
    run = chain(lambda chunk: chunk, scrub)
    out = run(b"xx secret-") + run(b"value yy") + run(b"")
    assert b"".join(out) == b"xx placeholder! yy"
