"""The upstream proxy's pure core: its settings, NO_PROXY-style exceptions, and the target it is handed."""
from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config import load_config
from gateway.net.upstream_proxy import (
    basic_credentials,
    bypassed,
    parse_bypass_entry,
    parse_upstream_proxy,
    proxy_resolves,
    proxy_target,
)


def proxy(resolve: str = "local", bypass: tuple[str, ...] = ()):
    p = parse_upstream_proxy("http://proxy.corp:3128", resolve=resolve, bypass=bypass)
    assert p is not None
    return p


@pytest.mark.parametrize("url, scheme, address", [
    ("http://proxy.corp:3128", "http", ("proxy.corp", 3128)),
    ("http://Proxy.Corp.:3128/", "http", ("proxy.corp", 3128)),
    ("http://proxy.corp", "http", ("proxy.corp", 80)),
    ("https://proxy.corp", "https", ("proxy.corp", 443)),
    ("http://10.1.2.3:8080", "http", ("10.1.2.3", 8080)),
    ("http://[::1]:3128", "http", ("::1", 3128)),
])
def test_proxy_urls(url, scheme, address):
    p = parse_upstream_proxy(url)
    assert p is not None and p.scheme == scheme and p.address == address and p.spec == (scheme, address)


@pytest.mark.parametrize("url", ["socks5://proxy:1080", "proxy.corp:3128", "http://", "http://u:p@proxy:3128",
                                 "http://proxy:3128/path", "http://proxy:3128?x=1", "http://proxy:99999", 3128])
def test_bad_proxy_urls_refuse_to_start(url):
    with pytest.raises(ValueError, match="upstream_proxy"):
        parse_upstream_proxy(url)


def test_no_proxy_is_none_but_credentials_without_one_refuse():
    assert parse_upstream_proxy("") is None
    with pytest.raises(ValueError):
        parse_upstream_proxy("", "env:U", "env:P")


@pytest.mark.parametrize("user, password", [("env:U", ""), ("", "env:P")])
def test_user_and_password_go_together(user, password):
    with pytest.raises(ValueError, match="together"):
        parse_upstream_proxy("http://p:1", user, password)


def test_resolve_mode_is_local_or_proxy():
    with pytest.raises(ValueError, match="resolve"):
        parse_upstream_proxy("http://p:1", resolve="remote")


@pytest.mark.parametrize("entry, host, port, expected", [
    ("corp.example", "corp.example", 443, True),
    ("corp.example", "api.corp.example", 443, True),
    ("corp.example", "evilcorp.example", 443, False),
    (".corp.example", "corp.example", 80, True),
    (".corp.example", "a.b.corp.example", 80, True),
    ("*.corp.example", "x.corp.example", 80, True),
    ("corp.example:8443", "corp.example", 8443, True),
    ("corp.example:8443", "corp.example", 443, False),
    ("10.0.0.0/8", "10.2.3.4", 443, True),
    ("10.0.0.0/8", "11.2.3.4", 443, False),
    ("10.0.0.0/8", "ten.example", 443, False),          # names are never matched by address
    ("192.0.2.7", "192.0.2.7", 80, True),
    ("192.0.2.7:80", "192.0.2.7", 443, False),
    ("[::1]:8080", "::1", 8080, True),
    ("::1", "::1", 1, True),
    ("fd00::/8", "fd00::5", 1, True),
    ("fd00::/8", "10.0.0.1", 1, False),
    ("CORP.Example.", "corp.example", 1, True),
])
def test_bypass_entries(entry, host, port, expected):
    assert bypassed(proxy(bypass=(entry,)), host, port) is expected


def test_star_bypasses_everything():
    assert bypassed(proxy(bypass=("*",)), "anything.example", 1)
    assert not bypassed(proxy(), "anything.example", 1)


@pytest.mark.parametrize("entry", ["", "http://corp.example", "u@corp.example", "10.0.0.0/33", "corp.example:0",
                                   "corp.example:x", "bad host", "[::1"])
def test_bad_bypass_entries(entry):
    with pytest.raises(ValueError, match="upstream_proxy_bypass"):
        parse_bypass_entry(entry)


def test_the_target_is_the_vetted_address_in_local_mode_never_the_name():
    p = proxy()
    assert proxy_target(p, "api.example", 443, ("93.184.216.34", "93.184.216.35")) == "93.184.216.34:443"
    assert proxy_target(p, "api.example", 443, ("2001:db8::1",)) == "[2001:db8::1]:443"
    assert proxy_target(p, "192.0.2.1", 80, ()) == "192.0.2.1:80"
    with pytest.raises(ValueError):
        proxy_target(p, "api.example", 443, ())


def test_the_target_is_the_name_in_proxy_mode():
    p = proxy("proxy")
    assert proxy_target(p, "api.example", 443, ()) == "api.example:443"
    assert proxy_target(p, "2001:db8::1", 443, ()) == "[2001:db8::1]:443"


def test_only_names_through_a_resolving_proxy_skip_the_local_check():
    assert proxy_resolves(proxy("proxy"), "api.example", 443)
    assert not proxy_resolves(proxy("proxy"), "10.0.0.1", 443)                 # literals are always vetted
    assert not proxy_resolves(proxy("proxy", ("api.example",)), "api.example", 443)   # bypassed: dialled here
    assert not proxy_resolves(proxy("local"), "api.example", 443)
    assert not proxy_resolves(None, "api.example", 443)


names = st.from_regex(r"[a-z]([a-z0-9-]{0,8}[a-z0-9])?(\.[a-z]([a-z0-9-]{0,8}[a-z0-9])?){1,3}", fullmatch=True).filter(lambda n: "--" not in n)
addresses = st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)).map(str)


@given(host=names, port=st.integers(1, 65535), vetted=st.lists(addresses, min_size=1, max_size=3))
def test_property_local_mode_hands_over_only_a_vetted_address(host, port, vetted):
    target = proxy_target(proxy(), host, port, tuple(vetted))
    assert host not in target
    assert target.rsplit(":", 1)[0].strip("[]") == vetted[0] and target.endswith(f":{port}")


@given(host=names, port=st.integers(1, 65535), entry=names)
def test_property_a_domain_entry_matches_exactly_its_subtree(host, port, entry):
    expected = host == entry or host.endswith("." + entry)
    assert bypassed(proxy(bypass=(entry,)), host, port) is expected


@given(base=st.ip_addresses(v=4), prefix=st.integers(0, 32), ip=st.ip_addresses(v=4))
def test_property_network_entries_match_by_containment(base, prefix, ip):
    net = ipaddress.ip_network(f"{base}/{prefix}", strict=False)
    assert bypassed(proxy(bypass=(str(net),)), str(ip), 1) is (ip in net)


def test_basic_credentials():
    assert basic_credentials("u", "p:w") == "Basic dTpwOnc="


def test_config_keys(tmp_path):
    cfg = load_config(data_dir=tmp_path, environ={}, overrides={"egress": {
        "upstream_proxy": "http://proxy.corp:3128", "upstream_proxy_user": "env:PU",
        "upstream_proxy_password": "vault:secret/proxy#password", "upstream_proxy_resolve": "proxy",
        "upstream_proxy_bypass": [".corp.example", "10.0.0.0/8"]}})
    p = cfg.egress.upstream_proxy
    assert p is not None and p.address == ("proxy.corp", 3128) and p.resolve == "proxy" and len(p.bypass) == 2
    assert load_config(data_dir=tmp_path, environ={}).egress.upstream_proxy is None


@pytest.mark.parametrize("over, match", [
    ({"upstream_proxy_user": "plain-text-user", "upstream_proxy_password": "env:P"}, "upstream_proxy_user"),
    ({"upstream_proxy_user": "env:U", "upstream_proxy_password": "hunter2"}, "upstream_proxy_password"),
    ({"upstream_proxy_bypass": "corp.example"}, "upstream_proxy_bypass"),
    ({"upstream_proxy_resolve": "dns"}, "upstream_proxy_resolve"),
])
def test_bad_config_refuses_to_start(tmp_path, over, match):
    with pytest.raises(ValueError, match=match):
        load_config(data_dir=tmp_path, environ={}, overrides={"egress": {"upstream_proxy": "http://p:3128", **over}})


def test_environment_override(tmp_path):
    cfg = load_config(data_dir=tmp_path, environ={"SANDGATE_EGRESS__UPSTREAM_PROXY": "http://p:3128",
                                                  "SANDGATE_EGRESS__UPSTREAM_PROXY_BYPASS": '["corp.example"]'})
    assert cfg.egress.upstream_proxy is not None and cfg.egress.upstream_proxy.address == ("p", 3128)
