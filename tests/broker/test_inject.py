from __future__ import annotations

import base64
import json
import string
from dataclasses import dataclass
from urllib.parse import parse_qs, quote

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from broker.inject import (Binding, check_destination, check_transport, find_placeholders, refuse_placeholders,
                           substitute_body, substitute_headers, substitute_query)
from broker.placeholders import make_placeholder
from broker.scrub import Scrubber, replacements_for
from broker.specs import SecretSpec
from gateway.net.hosts import normalise_host

PH = "sgph_Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0f"
PH2 = "ghp_Zz9yXx8wWv7uUt6sSr5qQp4oOn3mMl2kKj1iIh0g"
OWNERS = {PH: ("s1", "github"), PH2: ("s1", "other")}


def b64(data: str, urlsafe: bool = False, pad: bool = True) -> str:
    out = (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(data.encode()).decode()
    return out if pad else out.rstrip("=")


def pct(text: str, lower: bool = False) -> str:
    out = "".join(f"%{ord(c):02X}" for c in text)
    return out.lower() if lower else out


def binding(name="github", placeholder=PH, value="ghp_REALVALUE0123456789", hosts=("api.github.com",),
            inject_in=("header", "query")) -> Binding:
    return Binding(name, placeholder, value, frozenset(hosts), frozenset(inject_in))


# ---------------------------------------------------------------- detection

@pytest.mark.parametrize("data", [
    f"Bearer {PH}",
    f"token={PH}&x=1",
    f"xx{PH}yy",
    pct(PH),
    pct(PH, lower=True),
    PH[:5] + pct(PH[5:9]) + PH[9:],
    quote(pct(PH)),  # encoded twice
    f"Basic {b64('x-access-token:' + PH)}",
    f"basic   {b64(PH + ':x-oauth-basic')}",
    json.dumps({"auth": b64("user:" + PH)}),
    b64("id=" + PH, urlsafe=True, pad=False),
    "ZZZ" + b64("prefix-" + PH + "-suffix"),  # misaligned inside a longer run
    "q=" + quote(b64("u:" + PH), safe=""),  # base64 then percent-encoded
    b64(b64(PH)),  # base64 twice
    json.dumps({"k": PH}, ensure_ascii=False).replace("s", "\\u0073"),
    "&#x73;gph_" + PH[5:],
    PH.encode(),
    (b"\xff\x00" + PH.encode() + b"\xfe"),
])
def test_find_placeholder_forms(data):
    assert find_placeholders(data, OWNERS) == {("s1", "github")}


def test_find_several_and_none():
    assert find_placeholders(f"a={PH}&b={pct(PH2)}", OWNERS) == {("s1", "github"), ("s1", "other")}
    assert find_placeholders("nothing here " + PH[:-1], OWNERS) == set()
    assert find_placeholders(PH, {}) == set()
    assert find_placeholders(b"", OWNERS) == set()


@st.composite
def percent_encoded(draw, text: str) -> str:
    out = ""
    for char in text:
        how = draw(st.sampled_from(["raw", "upper", "lower"]))
        out += char if how == "raw" else pct(char, lower=how == "lower")
    for _ in range(draw(st.integers(0, 2))):
        out = quote(out, safe="") if draw(st.booleans()) else out.replace("%", "%25")
    return out


filler = st.text(alphabet=string.printable, max_size=40)


@given(data=st.data(), before=filler, after=filler)
def test_found_however_percent_encoded(data, before, after):
    encoded = data.draw(percent_encoded(PH))
    assert ("s1", "github") in find_placeholders(before + encoded + after, OWNERS)


@given(before=st.binary(max_size=12), after=st.binary(max_size=12), urlsafe=st.booleans(), pad=st.booleans(),
       outside=st.text(alphabet=" =&:,\"'", max_size=3))
def test_found_inside_any_base64(before, after, urlsafe, pad, outside):
    raw = before + PH.encode() + after
    token = (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(raw).decode()
    token = token if pad else token.rstrip("=")
    assert find_placeholders(outside + token + outside, OWNERS) == {("s1", "github")}


@settings(max_examples=200)
@given(st.binary(max_size=300))
def test_find_never_raises(blob):
    find_placeholders(blob, OWNERS)
    find_placeholders(blob.decode("latin-1"), OWNERS)


# ---------------------------------------------------------------- destination

@pytest.mark.parametrize("host, hosts, blocked", [
    ("api.github.com", ["api.github.com"], False),
    ("API.GitHub.com.", ["api.github.com"], False),      # the gateway's normalise_host first (see below)
    ("evil.com", ["api.github.com"], True),
    ("api.github.com.evil.com", ["api.github.com"], True),
    ("x.api.github.com", ["api.github.com"], True),
    ("uploads.github.com", ["*.github.com"], False),
    ("github.com", ["*.github.com"], True),
    ("evilgithub.com", ["*.github.com"], True),
    ("[::1]", ["::1"], False),
    ("0:0::1", ["::1"], False),
    ("127.0.0.1", ["localhost"], True),
])
def test_check_destination(host, hosts, blocked):
    b = binding(hosts=tuple(normalise_host(h) if not h.startswith("*.") else h for h in hosts))
    assert check_destination(normalise_host(host), [b]) == ([b] if blocked else [])


def test_check_destination_compares_canonical_names_only():
    """The broker never normalises: a spelling that is not canonical matches nothing (fails closed)."""
    b = binding(hosts=("api.github.com",))
    assert check_destination("API.GitHub.com.", [b]) == [b]


def test_check_destination_lists_only_foreign_bindings():
    gh, other = binding(), binding(name="other", placeholder=PH2, hosts=("example.com",))
    assert check_destination("api.github.com", {gh, other}) == [other]
    assert check_destination("api.github.com", [gh, gh]) == []


def test_check_destination_takes_specs_before_any_value_is_read():
    from broker.broker import parse_secret_specs

    spec = parse_secret_specs({"github": {"source": "local:github", "hosts": ["api.github.com"]}},
                              normalise_host)["github"]
    assert check_destination("evil.example", [spec]) == [spec]
    assert check_destination("api.github.com", [spec]) == []


@dataclass(frozen=True)
class Spec:
    name: str
    allow_plaintext: bool = False
    ports: frozenset = frozenset()


@pytest.mark.parametrize("tls, port, spec, cleartext, wrong_port", [
    (True, 443, Spec("a"), False, False),
    (False, 80, Spec("a"), True, False),
    (False, 80, Spec("a", allow_plaintext=True), False, False),
    (True, 8443, Spec("a", ports=frozenset({443})), False, True),
    (True, 443, Spec("a", ports=frozenset({443})), False, False),
    (False, 8080, Spec("a", allow_plaintext=True, ports=frozenset({80})), False, True),
    (False, 80, Spec("a", ports=frozenset({443})), True, True),
])
def test_check_transport(tls, port, spec, cleartext, wrong_port):
    got = check_transport(tls, port, [spec, spec])
    assert got == ([spec] if cleartext else [], [spec] if wrong_port else [])


SPECS = {"github": SecretSpec("github", "local:github", ("api.github.com",)),
         "plain": SecretSpec("plain", "local:plain", ("api.github.com",), allow_plaintext=True, ports=frozenset({80}))}


@pytest.mark.parametrize("found, host, tls, port, code, foreign", [
    ([("s1", "github")], "api.github.com", True, 443, None, False),
    # another session's placeholder: refused even to the host its secret is bound to, over TLS, to any port
    ([("s2", "github")], "api.github.com", True, 443, "secret.exfiltration", True),
    ([("s2", "github")], "evil.example", True, 443, "secret.exfiltration", True),
    ([("s1", "github"), ("s2", "github")], "api.github.com", True, 443, "secret.exfiltration", True),
    ([("s2", "nosuch")], "api.github.com", True, 443, "secret.exfiltration", True),
    ([("s1", "github")], "evil.example", True, 443, "secret.exfiltration", False),
    ([("s1", "github")], "api.github.com", False, 80, "secret.plaintext", False),
    ([("s1", "plain")], "api.github.com", False, 80, None, False),
    ([("s1", "plain")], "api.github.com", True, 443, "secret.port", False),
    ([], "evil.example", False, 80, None, False),
])
def test_refuse_placeholders(found, host, tls, port, code, foreign):
    refusal = refuse_placeholders(found, "s1", host, tls, port, SPECS)
    assert (refusal and (refusal.code, refusal.foreign)) == ((code, foreign) if code else None)


# ---------------------------------------------------------------- substitution

def test_headers_raw_encoded_and_basic():
    b = binding()
    headers = [
        ("Authorization", f"Bearer {PH}"),
        ("X-Api-Key", pct(PH, lower=True)),
        ("Proxy-Authorization", f"Basic {b64('u:' + PH)}"),
        ("Accept", "application/json"),
    ]
    out, uses = substitute_headers(headers, [b])
    assert out[0] == ("Authorization", "Bearer ghp_REALVALUE0123456789")
    assert out[1] == ("X-Api-Key", quote(b.value, safe=""))
    assert out[2] == ("Proxy-Authorization", f"Basic {b64('u:ghp_REALVALUE0123456789')}")
    assert out[3] == headers[3]
    assert uses == [("github", "header:authorization"), ("github", "header:x-api-key"),
                    ("github", "header:proxy-authorization")]


def test_basic_auth_with_placeholder_as_user():
    out, uses = substitute_headers([("authorization", f"basic {b64(PH + ':x-oauth-basic')}")], [binding()])
    assert out == [("authorization", f"basic {b64('ghp_REALVALUE0123456789:x-oauth-basic')}")]
    assert uses == [("github", "header:authorization")]


def test_headers_untouched_when_not_allowed_or_absent():
    headers = [("Authorization", f"Bearer {PH}")]
    assert substitute_headers(headers, [binding(inject_in=("query",))]) == (headers, [])
    assert substitute_headers([("A", "b")], [binding()]) == ([("A", "b")], [])


def test_header_refuses_control_characters():
    with pytest.raises(ValueError) as info:
        substitute_headers([("Authorization", f"Bearer {PH}")], [binding(value="evil\r\nX-Injected: 1")])
    assert "evil" not in str(info.value)


def test_query_values_go_in_percent_encoded():
    b = binding(value="a&b=c+d/e f")
    query, uses = substitute_query(f"token={PH}&other={pct(PH)}&x=1", [b])
    assert parse_qs(query) == {"token": ["a&b=c+d/e f"], "other": ["a&b=c+d/e f"], "x": ["1"]}
    assert uses == [("github", "query")]
    assert substitute_query(f"token={PH}", [binding(inject_in=("header",))]) == (f"token={PH}", [])


@pytest.mark.parametrize("content_type, body, expected", [
    ("application/x-www-form-urlencoded", f"key={PH}&a=1", "key=v%22%2F%26%5C&a=1"),
    ("application/json; charset=utf-8", json.dumps({"key": PH}), json.dumps({"key": 'v"/&\\'})),
    ("text/plain", f"key {PH}", 'key v"/&\\'),
    (None, f"key={pct(PH)}", "key=v%22%2F%26%5C"),
])
def test_body(content_type, body, expected):
    b = binding(value='v"/&\\', inject_in=("body",))
    out, uses = substitute_body(body.encode(), [b], content_type)
    assert out == expected.encode() and uses == [("github", "body")]


def test_body_untouched_unless_allowed():
    body = f"key={PH}".encode()
    assert substitute_body(body, [binding()]) == (body, [])


def test_single_pass_and_longest_first():
    short = binding(name="short", placeholder=PH[:30], value="SHORT-VALUE-zz")
    long_ = binding(name="long", placeholder=PH, value=PH2)  # a value that is another placeholder
    other = binding(name="other", placeholder=PH2, value="NEVER")
    out, uses = substitute_headers([("A", f"{PH} {PH[:30]}")], [short, long_, other])
    assert out == [("A", f"{PH2} SHORT-VALUE-zz")]
    assert sorted(uses) == [("long", "header:a"), ("short", "header:a")]


def test_binding_hides_its_value():
    assert "REALVALUE" not in repr(binding())
    with pytest.raises(ValueError):
        binding(inject_in=("path",))


# ---------------------------------------------------------------- properties

values = st.text(alphabet=string.ascii_lowercase + "!&+/=% .\"\\", max_size=16).map(lambda s: f"SECRET{s}END")
locations = st.frozensets(st.sampled_from(["header", "query", "body"]))
fillers = st.text(alphabet=string.ascii_lowercase + string.digits + "%=&+ :/.,", max_size=20)


@st.composite
def scenario(draw, encode: bool = True, fill=fillers):
    n = draw(st.integers(1, 3))
    rand = draw(st.randoms(use_true_random=False))
    bindings = [Binding(f"s{i}", make_placeholder(None, None, rand), draw(values), frozenset({"h.io"}),
                        draw(locations)) for i in range(n)]
    assume(len({b.placeholder for b in bindings}) == n)
    assume(not any(a.value in b.value for a in bindings for b in bindings if a is not b))
    parts = []
    for _ in range(draw(st.integers(1, 6))):
        b = draw(st.sampled_from(bindings))
        parts.append(draw(fill))
        parts.append(b.placeholder if not encode or draw(st.booleans()) else pct(b.placeholder, draw(st.booleans())))
    parts.append(draw(fill))
    return bindings, "".join(parts)


def _leaks(text: str, b: Binding) -> bool:
    return b.value in text or quote(b.value, safe="") in text or json.dumps(b.value)[1:-1] in text


@given(scenario(), st.sampled_from([None, "application/json", "application/x-www-form-urlencoded"]))
def test_no_value_where_its_binding_does_not_allow_it(case, content_type):
    bindings, text = case
    headers, _ = substitute_headers([("X-Data", text), ("Authorization", "Basic " + b64("u:" + text))], bindings)
    query, _ = substitute_query(text, bindings)
    body, _ = substitute_body(text.encode(), bindings, content_type)
    rendered = {"header": " ".join(v + " " + base64.b64decode(v[6:] + "==").decode("utf-8", "replace")
                                   if v.startswith("Basic ") else v for _, v in headers),
                "query": query, "body": body.decode()}
    for b in bindings:
        for location, out in rendered.items():
            if location not in b.inject_in:
                assert not _leaks(out, b), (location, b.name)


@given(scenario(encode=False, fill=st.text(alphabet=string.ascii_lowercase + "=&+ :/.,", max_size=20)))
def test_substitute_then_scrub_round_trips(case):
    bindings, raw = case  # placeholders raw, so scrubbing restores the text exactly
    bindings = [Binding(b.name, b.placeholder, b.value, b.hosts, frozenset({"header", "query"})) for b in bindings]
    scrubber = Scrubber(replacements_for(bindings))
    (header,), _ = substitute_headers([("X-Data", raw)], bindings)
    assert scrubber.sub_text(header[1]) == raw
    query, _ = substitute_query(raw, bindings)
    assert scrubber.sub_text(query) == raw


@given(value=st.text(alphabet=string.ascii_letters + string.digits + "-_.~+/", min_size=45, max_size=45),
       user=st.text(alphabet=string.ascii_letters, max_size=7))
def test_basic_auth_round_trips_through_scrub_when_lengths_match(value, user):
    b = binding(value=value)
    assume(len(value) == len(PH) and PH not in value)
    original = f"Basic {b64(user + ':' + PH)}"
    (header,), _ = substitute_headers([("Authorization", original)], [b])
    assert header[1] == f"Basic {b64(user + ':' + value)}"
    assert Scrubber(replacements_for([b])).sub_text(header[1]) == original


@given(scenario(), st.sampled_from(["a.io", "b.io", "evil.io"]), st.data())
def test_a_value_only_ever_goes_to_its_hosts(case, host, data):
    """The proxy's sequence: find, refuse foreign placeholders, substitute the session's bindings."""
    bindings, text = case
    bindings = [Binding(b.name, b.placeholder, b.value, data.draw(st.frozensets(st.sampled_from(["a.io", "b.io"]),
                                                                               min_size=1)),
                        frozenset({"header", "query", "body"})) for b in bindings]
    headers = [("X-Data", text), ("Authorization", "Basic " + b64("u:" + text))]
    found = set()
    for part in [text, *(v for _, v in headers)]:
        found |= find_placeholders(part, {b.placeholder: b for b in bindings})
    if check_destination(host, found):
        return  # blocked
    new_headers, uses_h = substitute_headers(headers, bindings)
    query, uses_q = substitute_query(text, bindings)
    body, uses_b = substitute_body(text.encode(), bindings)
    assert {name for name, _ in uses_h + uses_q + uses_b} <= {b.name for b in found}
    out = " ".join(v for _, v in new_headers) + base64.b64decode(new_headers[1][1][6:]).decode() + query + body.decode()
    for b in bindings:
        if host not in b.hosts:
            assert not _leaks(out, b)
