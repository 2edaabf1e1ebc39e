"""run --isolate's pure parts: links, their allocation, the capture rules, the listener addresses, the env."""
from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, strategies as st

from sandgate.isolation import (LINK_NET, MAX_LINKS, IsolationError, isolated_env, link_for, loopback_target,
                                   pick_link, render_ruleset, resolv_conf)
from gateway.net.synthetic import SYNTHETIC_POOL


def test_links_are_30s_in_the_link_net_with_short_names():
    first, last = link_for(0), link_for(MAX_LINKS - 1)
    assert (first.gateway, first.sandbox, str(first.network)) == ("10.200.0.1", "10.200.0.2", "10.200.0.0/30")
    assert last.network.subnet_of(LINK_NET) and not last.network.overlaps(SYNTHETIC_POOL)
    assert all(len(n) <= 15 for n in (last.host_if, last.sandbox_if))
    with pytest.raises(IsolationError):
        link_for(MAX_LINKS)


def test_pick_link_skips_networks_and_names_in_use():
    used = [ipaddress.ip_network("10.200.0.0/24"), ipaddress.ip_network("127.0.0.0/8"),
            ipaddress.ip_network("fe80::/64")]
    link = pick_link(used, {"sandgate-64"})
    assert link.index == 65 and link.gateway == "10.200.1.5"
    assert pick_link([ipaddress.ip_network("10.200.0.4/30")], ()).index == 0
    assert pick_link([ipaddress.ip_network("10.200.0.1/32")], ()).index == 1   # an address on the link: taken
    with pytest.raises(IsolationError):
        pick_link([ipaddress.ip_network("10.0.0.0/8")], ())


@given(st.lists(st.integers(0, MAX_LINKS - 1), max_size=30))
def test_a_picked_link_never_overlaps_what_is_in_use(taken):
    used = [link_for(i).network for i in taken]
    link = pick_link(used, ())
    assert not any(link.network.overlaps(n) for n in used)


@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1:8081", ("127.0.0.1", 8081)),
    ("127.0.0.5:53", ("127.0.0.5", 53)),
    ("0.0.0.0:8081", ("127.0.0.1", 8081)),
])
def test_loopback_targets(text, expected):
    assert loopback_target(text) == expected


@pytest.mark.parametrize("text", ["10.0.0.5:8081", "[::1]:8081", "192.0.2.1:53", "127.0.0.1", "127.0.0.1:0",
                                  "127.0.0.1:99999", "sandgate:8081", ""])
def test_other_listeners_cannot_be_captured_to(text):
    with pytest.raises(IsolationError):
        loopback_target(text)


def test_the_ruleset_captures_tcp_and_dns_and_drops_everything_else():
    link = link_for(3)
    rules = render_ruleset(link, ("127.0.0.1", 8081), ("127.0.0.1", 8053))
    assert rules.startswith("table inet sandgate_3 {")
    assert f'iifname "{link.host_if}" meta nfproto ipv4 meta l4proto tcp dnat ip to 127.0.0.1:8081' in rules
    assert f'iifname "{link.host_if}" meta nfproto ipv4 udp dport 53 dnat ip to 127.0.0.1:8053' in rules
    accepts = [line.strip() for line in rules.splitlines() if line.strip().endswith("accept")]
    assert accepts == [f'iifname "{link.host_if}" ip saddr {link.sandbox} ct status dnat ip daddr 127.0.0.1 tcp '
                       f'dport 8081 accept',
                       f'iifname "{link.host_if}" ip saddr {link.sandbox} ct status dnat ip daddr 127.0.0.1 udp '
                       f'dport 8053 accept']
    assert f'iifname "{link.host_if}" drop' in rules and f'oifname "{link.host_if}" drop' in rules


def test_resolv_conf_names_only_the_gateway():
    text = resolv_conf(link_for(2))
    assert [line for line in text.splitlines() if line.startswith("nameserver")] == ["nameserver 10.200.0.9"]
    assert "search" not in text


def test_isolated_env_drops_proxy_variables_only():
    env = {"HTTP_PROXY": "x", "https_proxy": "x", "NO_PROXY": "", "ALL_PROXY": "x", "CURL_CA_BUNDLE": "/ca.pem",
           "GITHUB_TOKEN": "ghp_x", "PATH": "/bin"}
    assert isolated_env(env) == {"CURL_CA_BUNDLE": "/ca.pem", "GITHUB_TOKEN": "ghp_x", "PATH": "/bin"}
