from __future__ import annotations

import base64
import json
import os
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from broker.scrub import MIN_BASE64_VALUE, Scrubber, StreamScrubber, scrub_bytes

REAL = b"ghp_R3alT0ken/with+odd=chars_0123456789"
PH = b"ghp_PlaceholderPlaceholderPlaceholder01"
assert len(REAL) == len(PH)
MAP = {REAL: PH}


def pct(data: bytes, lower: bool = False) -> bytes:
    out = "".join(f"%{b:02X}" for b in data)
    return (out.lower() if lower else out).encode()


@pytest.mark.parametrize("form", [
    REAL,
    json.dumps(REAL.decode()).encode(),
    json.dumps(REAL.decode()).replace("/", "\\/").encode(),
    json.dumps(REAL.decode()).replace("g", "\\u0067").replace("_", "\\u005F").encode(),
    quote(REAL.decode(), safe="").encode(),
    quote(REAL.decode(), safe="").lower().encode().replace(b"ghp_r3alt0ken", b"ghp_R3alT0ken"),
    pct(REAL),
    pct(REAL, lower=True),
    quote_plus(REAL.decode()).encode(),
])
def test_text_forms(form):
    out = scrub_bytes(b'{"echo": "' + form + b'", "n": 1}', MAP)
    assert REAL not in out and PH in out and out.startswith(b'{"echo": ')


@pytest.mark.parametrize("user", [b"", b"u", b"us", b"usr", b"x-access-token"])
@pytest.mark.parametrize("encode", [base64.b64encode, base64.urlsafe_b64encode])
@pytest.mark.parametrize("suffix", [b"", b"!", b"!!", b":more-data"])
def test_base64_any_alignment_leaves_no_bit_of_the_value(user, encode, suffix):
    blob = encode(user + b":" + REAL + suffix)
    out = scrub_bytes(b'{"Authorization": "Basic ' + blob + b'"}', MAP)
    token = out.split(b"Basic ")[1].split(b'"')[0]
    assert encode(user + b":" + PH + suffix) == token  # the neighbours' bits survive, the value's do not


# REAL above encodes the same in both base64 alphabets; this value does not: at every alignment its standard
# encoding holds '+' or '/' where the URL-safe one holds '-' or '_'.
ODD = b"sk_live_~~>>??~~>>??~~>>??0123"
ODD_PH = b"sk_live_PLACEHOLDERPLACEHOLDER"
assert len(ODD) == len(ODD_PH)


@pytest.mark.parametrize("lead", [b"", b"u", b"us"])
@pytest.mark.parametrize("encode", [base64.b64encode, base64.urlsafe_b64encode], ids=["standard", "url-safe"])
def test_base64_in_each_alphabet_of_a_value_whose_alphabets_differ(lead, encode):
    assert base64.b64encode(lead + ODD) != base64.urlsafe_b64encode(lead + ODD)
    blob = encode(lead + ODD + b"!")
    out = scrub_bytes(b"token=" + blob + b";", {ODD: ODD_PH})
    assert out == b"token=" + encode(lead + ODD_PH + b"!") + b";"


def test_values_with_spaces_and_unicode():
    real, ph = "pass phrase ü 🙂 ok".encode(), b"PLACEHOLDER-abcdefghij"
    for form in (real, quote_plus(real.decode()).encode(), quote(real.decode()).encode(),
                 json.dumps(real.decode()).encode(), base64.b64encode(b"x" + real)):
        assert real not in scrub_bytes(form, {real: ph})
        assert scrub_bytes(form, {real: ph}) != form


def test_several_values_and_no_false_positives():
    other, other_ph = b"sk-other-secret-value-9876543210", b"sk-PLACEHOLDER-other-0000000000"
    text = b"a " + REAL + b" b " + other + b" c " + REAL[:-1] + b" " + base64.b64encode(os.urandom(300))
    out = scrub_bytes(text, {REAL: PH, other: other_ph})
    assert out.count(PH) == 1 and out.count(other_ph) == 1 and REAL[:-1] in out
    assert scrub_bytes(b"nothing to see %41 \\u0041", MAP) == b"nothing to see %41 \\u0041"


def test_short_values_are_not_searched_in_base64():
    short = b"abc123"
    assert len(short) < MIN_BASE64_VALUE
    blob = base64.b64encode(b"x" + short)
    assert scrub_bytes(blob, {short: b"PHPHPH"}) == blob
    assert scrub_bytes(b"[" + short + b"]", {short: b"PHPHPH"}) == b"[PHPHPH]"


def test_bad_replacements():
    with pytest.raises(ValueError):
        Scrubber({b"": b"x"})
    with pytest.raises(ValueError):
        Scrubber({b"same": b"same"})
    assert scrub_bytes(b"data", {}) == b"data"
    assert StreamScrubber({}).feed(b"data") == b"data"


def test_sub_text_for_header_values():
    assert Scrubber(MAP).sub_text("token " + REAL.decode() + " \udcff") == "token " + PH.decode() + " \udcff"


def test_value_split_across_many_chunks():
    data = b"head " + REAL + b" middle " + base64.b64encode(b"u:" + REAL) + b" tail"
    stream = StreamScrubber(MAP)
    out = b"".join(stream.feed(data[i:i + 1]) for i in range(len(data))) + stream.flush()
    assert out == scrub_bytes(data, MAP) and REAL not in out


def test_mitmproxy_stream_protocol():
    stream = StreamScrubber(MAP)
    chunks = [b"x" * 5, REAL[:10], REAL[10:], b"y" * 3]
    outputs = [stream(c) for c in chunks]
    assert all(isinstance(o, list) and b"" not in o for o in outputs)
    assert outputs[1] == []  # nothing decided yet: no empty chunk (a chunked-encoding terminator)
    final = stream(b"")
    assert b"".join(b"".join(o) for o in outputs + [final]) == b"xxxxx" + PH + b"yyy"


# ---------------------------------------------------------------- properties

values = st.binary(min_size=1, max_size=24)
# bytes that no replacement ever emits (placeholders here are A-Z; base64 output is A-Za-z0-9+/-_=)
UNEMITTED = bytes(b for b in range(256) if not (chr(b).isascii() and (chr(b).isalnum() or chr(b) in "+/-_=")))


def forms(value: bytes) -> list[bytes]:
    text = value.decode("latin-1")
    out = [value, pct(value), pct(value, True), quote(text, safe="").encode(),
           base64.b64encode(value), base64.urlsafe_b64encode(b"ab" + value), base64.b64encode(b"a" + value)]
    try:
        out.append(json.dumps(value.decode("utf-8")).encode())
    except UnicodeDecodeError:
        pass
    return out


@st.composite
def stream_case(draw, values=values):
    value = draw(values)
    placeholder = draw(st.binary(min_size=1, max_size=30).map(lambda b: bytes(65 + x % 26 for x in b)))
    assume(value not in placeholder)
    pieces = []
    for _ in range(draw(st.integers(0, 5))):
        pieces.append(draw(st.binary(max_size=30)))
        pieces.append(draw(st.sampled_from(forms(value))))
    pieces.append(draw(st.binary(max_size=30)))
    data = b"".join(pieces)
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=8)))
    return {value: placeholder}, data, cuts


@settings(max_examples=300)
@given(stream_case())
def test_streaming_equals_whole_buffer_and_the_reference(case):
    replacements, data, cuts = case
    scrubber = Scrubber(replacements)
    whole = scrubber.sub(data)
    assert whole == scrubber.regex.sub(scrubber.replace, data)  # the fast path changes nothing
    stream = StreamScrubber(scrubber)
    bounds = [0, *cuts, len(data)]
    out = b"".join(stream.feed(data[a:b]) for a, b in zip(bounds, bounds[1:])) + stream.flush()
    assert out == whole


@settings(max_examples=300)
@given(stream_case(values=st.binary(min_size=1, max_size=24).map(lambda v: bytes(UNEMITTED[b % len(UNEMITTED)]
                                                                                for b in v))))
def test_raw_value_never_survives(case):
    # the value's bytes are never emitted by a replacement, so a value in the output
    # could only be input that escaped scrubbing
    replacements, data, _ = case
    (value,) = replacements
    assert value not in scrub_bytes(data, replacements)


@settings(max_examples=400)
@given(stream_case(), st.lists(st.tuples(st.integers(0, 200), st.integers(0, 200)), max_size=6))
def test_could_match_false_means_nothing_in_it_changes(case, slices):
    """could_match(data) is False only when scrubbing changes neither `data` nor any part of it (the response
    head is checked as one blob, then its fields are left as they are)."""
    replacements, data, cuts = case
    scrubber = Scrubber(replacements)
    bounds = [0, *cuts, len(data)]
    parts = [data[a:b] for a, b in zip(bounds, bounds[1:])] + [data[a:b] for a, b in slices]
    for blob in [data, *parts]:
        if not scrubber.could_match(blob):
            assert scrubber.sub(blob) == blob
            for part in parts:
                if part in blob:
                    assert scrubber.sub(part) == part
    if scrubber.sub(data) != data:
        assert scrubber.could_match(data)
    assert not Scrubber({}).could_match(data)


def _b64_reference(real: bytes, alphabet: bytes, align: int) -> tuple[bytes, bytes]:
    """_b64_form's pattern and core from the definition: every character of the encoding is the class of the
    alphabet's symbols that agree with the value on the bits it holds of it."""
    import re

    lead = 2 * align
    bits = lead + 8 * len(real)
    chars = -(-bits // 6)
    trail = chars * 6 - bits
    value, mask = int.from_bytes(real, "big") << trail, ((1 << (8 * len(real))) - 1) << trail
    pattern, core = b"", b""
    for i in range(chars):
        want, keep = (value >> 6 * (chars - 1 - i)) & 63, (mask >> 6 * (chars - 1 - i)) & 63
        options = [alphabet[s:s + 1] for s in range(64) if s & keep == want & keep]
        if len(options) == 1:
            pattern, core = pattern + re.escape(options[0]), core + options[0]
        else:
            pattern += b"[" + b"".join(map(re.escape, options)) + b"]"
    return pattern, core


@settings(max_examples=200)
@given(st.binary(min_size=1, max_size=40), st.text(min_size=1, max_size=12))
def test_the_forms_are_their_definitions(real, text):
    """_b64_form's shortcut for a character wholly the value's, and the escapes kept per character, give what
    the definitions give."""
    from broker.scrub import STD, URLSAFE, _b64_form, _case_variants, _escape_triggers

    for alphabet in (STD, URLSAFE):
        for align in range(3):
            pattern, _n, core, _h = _b64_form(real, b"P" * len(real), alphabet, align)
            assert (pattern, core) == _b64_reference(real, alphabet, align)
    expected: set[bytes] = set()
    encoded = text.encode("utf-8", "surrogatepass")
    for b in set(encoded):
        expected |= {b"%" + v for v in _case_variants(f"{b:02X}")}
    try:
        chars = encoded.decode("utf-8")
    except UnicodeDecodeError:
        chars = encoded.decode("latin-1")
    for char in set(chars):
        code = ord(char) if ord(char) <= 0xFFFF else 0xD800 + ((ord(char) - 0x10000) >> 10)
        expected |= {b"\\u" + v for v in _case_variants(f"{code:04X}")}
        expected |= {b"\\" + {'"': b'"', "\\": b"\\", "/": b"/", "\b": b"b", "\f": b"f", "\n": b"n", "\r": b"r",
                              "\t": b"t"}[char]} if char in '"\\/\b\f\n\r\t' else set()
        expected |= {b"+"} if char == " " else set()
        if char != "\ufffd":
            expected |= {b"&#", *{"&": (b"&amp;",), "<": (b"&lt;",), ">": (b"&gt;",), '"': (b"&quot;",),
                                  "'": (b"&apos;",)}.get(char, ())}
    assert _escape_triggers(encoded) == expected
