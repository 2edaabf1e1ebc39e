import re
from pathlib import Path

import pytest
import regorus
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from gateway.net.hosts import (
    AllowEntry,
    host_matches,
    match_allowlist,
    normalise_host,
    parse_allow_entry,
)

LIB = Path(__file__).resolve().parents[3] / "policies" / "sandgate" / "lib"


@pytest.mark.parametrize("host, expected", [
    ("Example.COM", "example.com"),
    ("example.com.", "example.com"),
    ("_dmarc.example.com", "_dmarc.example.com"),
    ("1.2.3.4.nip.io", "1.2.3.4.nip.io"),
    ("a" * 63 + ".com", "a" * 63 + ".com"),
    (".".join(["a" * 63] * 3 + ["b" * 61]), ".".join(["a" * 63] * 3 + ["b" * 61])),
    ("bücher.de", "xn--bcher-kva.de"),
    ("BÜCHER.de.", "xn--bcher-kva.de"),
    ("xn--bcher-kva.de", "xn--bcher-kva.de"),
    ("例え.テスト", "xn--r8jz45g.xn--zckzah"),
    ("bücher。de", "xn--bcher-kva.de"),
    ("[::1]", "::1"),
    ("[2001:DB8:0::1]", "2001:db8::1"),
    ("fe80::1%eth0", "fe80::1"),
    ("::ffff:127.0.0.1", "127.0.0.1"),
    ("[::ffff:169.254.169.254]", "169.254.169.254"),
    ("0x7f000001", "127.0.0.1"),
    ("2130706433", "127.0.0.1"),
    ("0177.0.0.1", "127.0.0.1"),
    ("127.1", "127.0.0.1"),
    ("127.0.0.1.", "127.0.0.1"),
    ("１２７.０.０.１", "127.0.0.1"),
    ("127。0。0。1", "127.0.0.1"),
])
def test_normalise_host(host, expected):
    assert normalise_host(host) == expected


@pytest.mark.parametrize("host", [
    "", " ", "exa mple.com", "example.com\n", "\x00", "ex\u200bample.com", "a/b", "user@host",
    "example.com／", "a\\b", "exa%mple.com", "example.com:443", "a" * 64 + ".com",
    ".".join(["a" * 63] * 4), "a..b", ".example.com", "example.com..", "-a.com", "a-.com",
    "*.example.com", "256.1.1.1", "4294967296", "foo.123", "[example.com]", "[::1", "a..ü",
])
def test_normalise_host_rejects(host):
    with pytest.raises(ValueError):
        normalise_host(host)


@pytest.mark.parametrize("text, canonical", [
    ("pypi.org", "pypi.org"),
    ("  PyPI.org.  ", "pypi.org"),
    ("example.com:8443", "example.com:8443"),
    ("*.GitHub.com", "*.github.com"),
    ("*.github.com.:443", "*.github.com:443"),
    ("*.co.uk", "*.co.uk"),
    ("*.bücher.de", "*.xn--bcher-kva.de"),
    ("[::1]:443", "[::1]:443"),
    ("[0:0::1]:0443", "[::1]:443"),
    ("::1", "[::1]"),
    ("[::1]", "[::1]"),
    ("0x7f000001:80", "127.0.0.1:80"),
    ("[::ffff:10.0.0.1]:443", "10.0.0.1:443"),
    ("example.com:65535", "example.com:65535"),
])
def test_parse_allow_entry(text, canonical):
    entry = parse_allow_entry(text)
    assert str(entry) == canonical
    assert parse_allow_entry(str(entry)) == entry


def test_allow_entry_fields():
    assert parse_allow_entry("example.com:8443") == AllowEntry("example.com", 8443)
    assert parse_allow_entry("*.github.com") == AllowEntry("*.github.com", None)
    assert parse_allow_entry("[::1]:443") == AllowEntry("::1", 443)


@pytest.mark.parametrize("text", [
    "", "   ", "*", "*.", "*.com", "*.com.", "a.*.com", "*foo.com", "**.foo.com", "*.*.foo.com",
    "foo.*", "example.com:0", "example.com:65536", "example.com:99999", "example.com:https",
    "example.com:", "example.com:-1", "example.com:+80", "example.com:٤٤٣", "example.com: 80",
    "https://x", "x/path", "[::1]:", "[::1]443", "[example.com]:443", "[1.2.3.4]:80", "a:b:c",
    "*.1.2.3.4", "*.[::1]", "user@example.com", "example.com:80:81",
])
def test_parse_allow_entry_rejects(text):
    with pytest.raises(ValueError):
        parse_allow_entry(text)


@pytest.mark.parametrize("entry, host, port, expected", [
    ("pypi.org", "pypi.org", 443, True),
    ("pypi.org", "PyPI.org.", 8080, True),
    ("pypi.org", "files.pypi.org", 443, False),
    ("pypi.org", "evilpypi.org", 443, False),
    ("*.github.com", "api.github.com", 443, True),
    ("*.github.com", "a.b.github.com", 22, True),
    ("*.github.com", "API.GitHub.com.", 443, True),
    ("*.github.com", "github.com", 443, False),
    ("*.github.com", "evilgithub.com", 443, False),
    ("*.github.com", "github.com.evil.test", 443, False),
    ("*.github.com:443", "api.github.com", 22, False),
    ("example.com:8443", "example.com", 8443, True),
    ("example.com:8443", "example.com", 443, False),
    ("bücher.de", "xn--bcher-kva.de", 443, True),
    ("xn--bcher-kva.de", "BÜCHER.de", 443, True),
    ("[::1]:443", "[::1]", 443, True),
    ("[::1]:443", "::1", 80, False),
    ("::1", "0:0:0:0:0:0:0:1", 22, True),
    ("127.0.0.1", "0x7f000001", 80, True),
    ("127.0.0.1:80", "127.1", 80, True),
    ("10.0.0.1", "10.0.0.10", 80, False),
])
def test_host_matches(entry, host, port, expected):
    assert host_matches(parse_allow_entry(entry), normalise_host(host), port) is expected


def test_match_allowlist():
    entries = [parse_allow_entry(e) for e in ("pypi.org", "*.github.com", "example.com:8443")]
    assert match_allowlist(entries, "api.github.com", 443)
    assert match_allowlist(entries, "example.com", 8443)
    assert not match_allowlist(entries, "example.com", 443)
    assert not match_allowlist(entries, "github.com", 443)
    assert not match_allowlist([], "pypi.org", 443)


HOST_CHARS = st.sampled_from(list("abcAZ019-_.:[]%*") + ["ü", "ß", "例", "。", "１", "\u200b", " ", "/"])


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(), st.text(HOST_CHARS, max_size=30)))
def test_normalise_host_is_idempotent_and_raises_only_value_error(text):
    try:
        once = normalise_host(text)
    except ValueError:
        return
    assert normalise_host(once) == once
    assert once == once.lower() and once.isascii()


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(), st.text(HOST_CHARS, max_size=30)))
def test_parse_allow_entry_raises_only_value_error_and_round_trips(text):
    try:
        entry = parse_allow_entry(text)
    except ValueError:
        return
    assert parse_allow_entry(str(entry)) == entry


# -- the Rego twin (policies/sandgate/lib/hosts.rego) -------------------------------------------

RULES = sorted(set(re.findall(r"^(test_\w+)", (LIB / "hosts_test.rego").read_text(), re.M)))


@pytest.fixture(scope="module")
def rego_bundle():
    engine = regorus.Engine()
    engine.add_policy("hosts.rego", (LIB / "hosts.rego").read_text())
    engine.add_policy("hosts_test.rego", (LIB / "hosts_test.rego").read_text())
    engine.add_policy("probe.rego", "package probe\nimport rego.v1\nimport data.sandgate.lib.hosts\n"
                      "match := hosts.entry_matches(input.entry, input.host, input.port)\n"
                      "listed := hosts.allowlisted(input.entries, input.host, input.port)\n")
    return engine


def rego_query(engine, entrypoint, value=None):
    engine.set_input(value or {})                 # input is engine state: one evaluation at a time
    result = engine.eval_rule("data." + entrypoint.replace("/", "."))
    return "undefined" if result is None else result


def test_rego_tests_found():
    assert len(RULES) >= 20


@pytest.mark.parametrize("rule", RULES)
def test_rego_hosts_test_rule(rego_bundle, rule):
    assert rego_query(rego_bundle, f"sandgate/lib/hosts_test/{rule}") is True


LABELS = st.sampled_from(["a", "b", "api", "github", "com", "x-1", "xn--bcher-kva", "_srv", "0x1"])
NAMES = st.lists(LABELS, min_size=1, max_size=4).map(".".join)
IPS = st.sampled_from(["::1", "2001:db8::1", "fe80::1", "127.0.0.1", "10.0.0.1", "8.8.8.8"])
PORTS = st.sampled_from([1, 22, 80, 443, 8443, 65535])


@st.composite
def _entry_or_none(draw):
    ip = draw(st.booleans()) and draw(st.booleans())
    host = draw(IPS) if ip else ("*." if draw(st.booleans()) else "") + draw(NAMES)
    port = draw(st.none() | PORTS)
    text = (f"[{host}]" if ":" in host else host) + ("" if port is None else f":{port}")
    try:
        return parse_allow_entry(text)
    except ValueError:          # e.g. a name ending in `0x1`: looks like an IPv4 address but is not one
        return None


def entries():
    """Valid allow entries. A text that does not parse is drawn again in place (a filter retries), not the whole
    example thrown away (`assume`): a list of four entries lost one example in three that way."""
    return _entry_or_none().filter(lambda entry: entry is not None)


@settings(max_examples=200, deadline=None)
@given(entries(), st.one_of(NAMES, IPS, st.tuples(NAMES, st.booleans())), st.none() | PORTS)
def test_rego_entry_matches_agrees_with_python(rego_bundle, entry, host, port):
    port = port or entry.port or 443  # None: the entry's own port
    if isinstance(host, tuple):  # a host near the entry: its apex, or a name under it
        prefix, apex = host
        base = entry.host.removeprefix("*.")
        host = base if apex or ":" in base else f"{prefix}.{base}"
    try:
        host = normalise_host(host)
    except ValueError:  # e.g. "a.0x1": a name ending in a number is an (invalid) IPv4 literal
        assume(False)
    expected = host_matches(entry, host, port)
    event(f"match={expected}")
    got = rego_query(rego_bundle, "probe/match", {"entry": str(entry), "host": host, "port": port})
    assert got is expected, (str(entry), host, port)


@settings(max_examples=300, deadline=None)
@given(st.lists(entries(), min_size=1, max_size=4), st.one_of(NAMES, IPS, st.tuples(NAMES, st.booleans())),
       st.none() | PORTS)
def test_rego_allowlisted_agrees_with_python(rego_bundle, entry_list, host, port):
    """The fast set lookup (`allowlisted`) decides as Python does for canonical entries (what sandgate writes)."""
    first = entry_list[0]
    port = port or first.port or 443
    if isinstance(host, tuple):
        prefix, apex = host
        base = first.host.removeprefix("*.")
        host = base if apex or ":" in base else f"{prefix}.{base}"
    try:
        host = normalise_host(host)
    except ValueError:
        assume(False)
    expected = any(host_matches(e, host, port) for e in entry_list)
    event(f"match={expected}")
    got = rego_query(rego_bundle, "probe/listed", {"entries": [str(e) for e in entry_list], "host": host,
                                                    "port": port})
    assert got is expected, ([str(e) for e in entry_list], host, port)


def _outcome(fn, text):
    try:
        return ("ok", fn(text))
    except ValueError as exc:
        return ("error", str(exc))


_HOSTY = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="aAbB0123456789.-_:[]@/%xX\u3002\uff0e\u00fc\u0661 ", max_size=30),
    st.sampled_from(["allowed.test", "allowed.test:8080", "[::1]:443", "127.0.0.1", "0x7f.1", "EXAMPLE.com.",
                     "bücher.de:80", "a..b", "", "::1", "[::ffff:10.0.0.1]", "host:0", "host:65536"]),
)


@settings(max_examples=400)
@given(texts=st.lists(_HOSTY, min_size=1, max_size=6))
def test_the_cached_normalisers_answer_as_the_uncached_ones(texts):
    """normalise_host and parse_authority keep results per exact string: the same answer (and the same error)
    as computing it, the first time and every time after, whatever came in between."""
    from gateway.net import hosts
    for text in texts + texts:
        assert _outcome(normalise_host, text) == _outcome(hosts._normalise, text)
        assert _outcome(hosts.parse_authority, text) == _outcome(hosts._parse_authority, text)


def test_the_normaliser_cache_is_bounded_and_skips_non_strings():
    from gateway.net import hosts
    assert hosts._normalise_cached.cache_info().maxsize == hosts._CACHED
    assert hosts._parse_authority_cached.cache_info().maxsize == hosts._CACHED
    with pytest.raises(ValueError):
        normalise_host(b"example.com")          # type: ignore[arg-type]
    with pytest.raises(ValueError):
        hosts.parse_authority(["example.com"])  # type: ignore[arg-type]

    class Sneaky(str):
        def lower(self):                        # a str subclass is never served from the cache
            return "other.test"
    assert normalise_host(Sneaky("example.com")) == hosts._normalise(Sneaky("example.com"))
