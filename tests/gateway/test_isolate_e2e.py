"""`sandgate run --isolate` end to end: real curl, a raw socket, real DNS queries, in real network namespaces.

Everything runs inside `unshare -n -m` (tests/support/isolate_probe.py): that namespace plays the host (sandgate,
its transparent listener and resolver, the upstreams on its loopback), each `run --isolate` builds its sandbox
namespace inside it, and nothing can leave the machine. The probe runs once per module; each test reads its part.
"""
from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.conftest import need
from tests.support import netns
from tests.support.gateway import ROOT
from tests.support.isolate_probe import BUDGET_S

# The probe runs twenty sandboxes one after another: minutes on a loaded machine. It stops itself after BUDGET_S
# (naming the case that hung); this module's wait for it, and pytest's, are longer.
PROBE_WAIT_S = BUDGET_S + 90
pytestmark = pytest.mark.timeout(PROBE_WAIT_S + 60)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    need(os.geteuid() == 0, "root (network namespaces, nftables)")
    for binary in ("unshare", "ip", "nft", "curl"):
        need(shutil.which(binary) is not None, f"the {binary} binary")
    tmp = tmp_path_factory.mktemp("isolate")
    proc = netns.run_probe(str(ROOT / "tests/support/isolate_probe.py"), str(tmp), timeout=PROBE_WAIT_S)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    netns.assert_isolated(results["isolation"])      # the probe and its sandgate had loopback only
    return results


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_a_client_that_ignores_the_proxy_is_still_decided(lab):
    # curl told to use no proxy at all: captured, intercepted (it trusts the session's CA), decided, forwarded
    assert lab["https_noproxy"] == {"rc": 0, "out": "200", "err": ""}
    # a raw socket to NAME:PORT, no proxy and no library: the same
    assert lab["raw_socket"]["out"] == "HTTP/1.1 200 OK\n"
    assert "/raw" in lab["plain_paths"] and ["/isolated-tls", ""] in lab["secure_seen"]
    events = [(e["host"], e["method"], e["action"]) for e in lab["events"]]
    assert ("secure.test", "CONNECT", "allow") in events and ("secure.test", "GET", "allow") in events
    assert ("allowed.test", "CONNECT", "allow") in events and ("allowed.test", "GET", "allow") in events


def test_the_isolated_command_has_no_proxy_variables_but_the_ca(lab):
    env = dict(line.split("=", 1) for line in lines(lab["env"]["out"]) if "=" in line)
    assert not {k for k in env if k.lower() in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}
    assert env["CURL_CA_BUNDLE"].endswith("/ca.pem") and env["SSL_CERT_FILE"] == env["CURL_CA_BUNDLE"]
    assert not {k for k in env if k.startswith("SANDGATE_")}


def test_dns_answers_only_allowed_names(lab):
    resolved = dict(line.split(" ", 1) for line in lines(lab["resolve"]["out"]))
    assert resolved["allowed.test"].startswith("['10.200.1") and resolved["secure.test"].startswith("['10.200.1")
    assert resolved["allowed.test"] != resolved["secure.test"]        # one synthetic address per name
    for name in ("evil.test", "localhost.evil.test", "127.0.0.1.nip.io"):
        assert resolved[name] == "-", name
    # asked directly, of the gateway or of any other server: port 53 always reaches the filtering resolver
    dig = lines(lab["dig"]["out"])
    assert dig[0] == dig[1] and dig[0].startswith("NOERROR ['10.200.1")
    assert dig[2] == "NXDOMAIN []" and dig[3] == "NXDOMAIN []"       # a denied name gets no answer
    assert dig[4] == "NOERROR []"                                     # no IPv6 answers (no IPv6 route)
    assert dig[5] == "NXDOMAIN []"
    assert "sandgate: denied evil.test: evil.test is not on this session's allow list (DNS)" in lab["dig"]["err"]
    assert "Could not resolve host: evil.test" in lab["denied_name"]["err"]


def test_direct_connections_to_other_addresses_fail(lab):
    rcs = [line.strip() for line in lines(lab["direct_ip"]["out"])]
    assert rcs == ["rc=52", "rc=35", "rc=52"]       # closed before any byte was forwarded (plain, TLS, the gateway)
    err = lab["direct_ip"]["err"]
    assert ("sandgate: denied 192.0.2.10: destination address class documentation is not allowed; 192.0.2.10 is "
            "not on this session's allow list") in err
    assert "sandgate: denied 10.200.0.1: " in err   # the gateway's own address: sandgate's API is out of reach
    assert "/direct" not in lab["plain_paths"] and all(p != "/direct-sni" for p, _ in lab["secure_seen"])
    assert lab["udp"]["out"].strip() == "noanswer"  # UDP that is not DNS goes nowhere


def test_one_destination_per_request_and_secrets_in_transparent_mode(lab):
    assert lab["host_mismatch"]["out"] == "403"
    # curl offers h2; the upstream speaks HTTP/1.1, so ALPN follows it and the other host arrives as a Host header
    # (over h2 it would be the :authority: "the request names another host or port than its tunnel's")
    assert ("the Host header does not match the destination" in lab["host_mismatch"]["err"]
            or "the request names another host or port than its tunnel's" in lab["host_mismatch"]["err"])
    assert lab["secret"]["out"] == "200 403"      # injected for its bound host; refused anywhere else
    assert ["/with-secret", "Bearer ghp_" + "R" * 36] in lab["secure_seen"]
    assert "/exfil" not in lab["plain_paths"]
    assert "sandgate: denied allowed.test: secret demo is not bound to allowed.test" in lab["secret"]["err"]


def test_transparent_403s_name_the_access_endpoint(lab):
    docs = [json.loads(line) for line in lines(lab["denied_bodies"]["out"])]
    assert len(docs) == 2, lab["denied_bodies"]
    for doc in docs:
        assert doc["access_request"] == "http://sandgate.internal/v1/access-requests", doc
        assert doc["hint"] and "\n" not in doc["hint"], doc


def test_exit_code_denial_lines_and_session_end(lab):
    assert lab["exit_code"]["rc"] == 7
    out = lab["denied_line"]
    assert out["rc"] == 3
    refusals = [line for line in lines(out["err"]) if line.startswith("sandgate: ")]
    assert refusals == [
        "sandgate: denied other.test: other.test is not on this session's allow list (DNS)",
        "sandgate: denied 192.0.2.10: destination address class documentation is not allowed; 192.0.2.10 is not "
        "on this session's allow list"]
    assert lab["sessions"] and all(s == {"status": "deleted", "source": None} for s in lab["sessions"])


def test_namespaces_links_and_rules_are_removed(lab):
    assert lab["bad_secret"]["rc"] == 2 and "unknown secrets: nope" in lab["bad_secret"]["err"]
    assert lab["leftovers"] == {"netns": [], "links": [], "tables": [], "etc": []}


def test_raw_tcp_only_to_listed_destinations(lab):
    # egress.raw_tcp lists allowed.test:ECHO: the name behind the synthetic address is the destination, as a
    # CONNECT target would be; raw bytes anywhere else are refused before they are forwarded
    echoed, refused = lines(lab["raw_tcp"]["out"])
    assert echoed == "b'\\x00\\x01raw bytes'" and refused.startswith("closed")
    assert lab["echo_connections"] == 1
    assert "sandgate: denied allowed.test: the tunnel carries bytes that are not HTTP or TLS" in lab["raw_tcp"]["err"]


def test_an_isolated_sandbox_files_an_access_request_from_inside(lab):
    # no proxy credentials under --isolate: the filtering resolver answers sandgate.internal, the source binding
    # names the session, and the proxy answers the name itself (plain HTTP, and HTTPS with the session's CA)
    out = lines(lab["internal"]["out"])
    assert out[1:] == ["202", "200"], lab["internal"]
    filed = json.loads(out[0])
    assert filed["status"] == "pending" and filed["id"]
    # another session (the next isolated run) cannot read it
    assert lab["internal_other"]["out"].endswith(" 404")
    assert '"error": "not_found"' in lab["internal_other"]["out"]
    mine = [a for a in lab["access"] if a["host"] == "api.partner.test"]
    assert len(mine) == 1 and mine[0]["status"] == "cancelled"        # its session ended with the run


def test_a_grant_makes_its_host_resolvable_and_allows_only_what_it_covers(lab):
    # before the decision the name does not resolve (000); approved as GET under /v1/, it resolves and GET
    # /v1/x reaches the upstream, while POST and /admin are refused
    assert lab["granted"]["out"] == "000 200 200 403 403", lab["granted"]
    assert "/v1/x" in lab["plain_paths"] and "/admin" not in lab["plain_paths"]

