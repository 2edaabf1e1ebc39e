"""Red team, pure: the scrubber finds a real value echoed as HTML (an error or debug page escaping what it
quotes): named references for & < > " ', numeric references (decimal and hex, any case, leading zeros) for
any character. Properties: streaming still equals the whole buffer, and the value never survives."""
from __future__ import annotations

import html

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.scrub import Scrubber, StreamScrubber, scrub_bytes

REAL = b'pa&ss"w<o>rd\'-0123456789'
PH = b"PLACEHOLDER-PLACEHOLDER-"
assert len(REAL) == len(PH)
MAP = {REAL: PH}


def numeric(value: bytes, style: str) -> bytes:
    text = value.decode()
    if style == "dec":
        return "".join(f"&#{ord(c)};" for c in text).encode()
    if style == "hex":
        return "".join(f"&#x{ord(c):x};" for c in text).encode()
    if style == "HEX":
        return "".join(f"&#X{ord(c):04X};" for c in text).encode()
    return "".join(f"&#{ord(c):03d};" if i % 2 else c for i, c in enumerate(text)).encode()


@pytest.mark.parametrize("form", [
    html.escape(REAL.decode()).encode(),                       # &amp; &quot; &lt; &gt; &#x27;
    html.escape(REAL.decode()).replace("&#x27;", "&#39;").encode(),
    html.escape(REAL.decode()).replace("&#x27;", "&apos;").encode(),
    numeric(REAL, "dec"), numeric(REAL, "hex"), numeric(REAL, "HEX"), numeric(REAL, "mixed"),
])
def test_html_escaped_echo_is_scrubbed(form):
    out = scrub_bytes(b"<p>Authorization: Bearer " + form + b"</p>", MAP)
    assert PH in out and REAL not in out and out.startswith(b"<p>Authorization: Bearer ")
    assert html.unescape(out.decode()).encode().find(REAL) == -1


def test_plain_html_entities_elsewhere_are_left_alone():
    page = b"<p>Tom &amp; Jerry &#39;quoted&#39; &lt;b&gt;</p>"
    assert scrub_bytes(page, MAP) == page


@st.composite
def html_case(draw):
    value = draw(st.text(alphabet=st.sampled_from('ab&"<>\'1 ;#x'), min_size=2, max_size=16)).encode()
    form = draw(st.sampled_from(["raw", "escape", "dec", "hex"]))
    shown = {"raw": value, "escape": html.escape(value.decode()).encode(), "dec": numeric(value, "dec"),
             "hex": numeric(value, "hex")}[form]
    before = draw(st.text(alphabet="ab&;# <>", max_size=12)).encode()
    after = draw(st.text(alphabet="ab&;# <>", max_size=12)).encode()
    cuts = sorted(draw(st.lists(st.integers(0, len(before + shown + after)), max_size=6)))
    return value, before + shown + after, cuts


@settings(max_examples=300)
@given(html_case())
def test_html_forms_streamed_equal_whole_and_the_value_never_survives_unescaping(case):
    value, data, cuts = case
    scrubber = Scrubber({value: b"Z" * len(value)})
    whole = scrubber.sub(data)
    assert whole == scrubber.regex.sub(scrubber.replace, data)
    stream = StreamScrubber(scrubber)
    bounds = [0, *cuts, len(data)]
    assert b"".join(stream.feed(data[a:b]) for a, b in zip(bounds, bounds[1:])) + stream.flush() == whole
    assert value not in whole and b"Z" * len(value) in whole     # the form shown was replaced
