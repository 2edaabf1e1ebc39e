"""A sandbox in its own network namespace whose only way out is sandgate's proxy address."""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess

import pytest

from tests.conftest import LOOPBACK_CONFIG, need
from tests.support.gateway import Sandgate


def sh(*args, check=True, timeout=20):
    return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=timeout)


@pytest.fixture
def netns():
    need(os.geteuid() == 0 and shutil.which("ip") is not None, "root and iproute2 for network namespaces")
    tag = secrets.token_hex(3)
    name, host_if, ns_if = f"sgt{tag}", f"sgh{tag}", f"sgn{tag}"
    octet = int(tag[:2], 16) % 250 + 1
    host_ip, ns_ip = f"10.200.{octet}.1", f"10.200.{octet}.2"
    try:
        sh("ip", "netns", "add", name)
        sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        sh("ip", "link", "set", ns_if, "netns", name)
        sh("ip", "addr", "add", f"{host_ip}/30", "dev", host_if)
        sh("ip", "link", "set", host_if, "up")
        sh("ip", "netns", "exec", name, "ip", "addr", "add", f"{ns_ip}/30", "dev", ns_if)
        sh("ip", "netns", "exec", name, "ip", "link", "set", ns_if, "up")
        sh("ip", "netns", "exec", name, "ip", "link", "set", "lo", "up")
    except subprocess.CalledProcessError as exc:
        sh("ip", "netns", "del", name, check=False)
        need(False, f"network namespaces ({exc.stderr.strip()})")
    yield name, host_ip
    sh("ip", "netns", "del", name, check=False)
    sh("ip", "link", "del", host_if, check=False)


def test_sandbox_in_netns_reaches_upstream_only_through_proxy(tmp_path, netns, upstream):
    name, host_ip = netns
    curl = shutil.which("curl")
    need(curl is not None, "curl")
    with Sandgate(tmp_path, LOOPBACK_CONFIG, proxy_host=host_ip) as sg:
        sess = sg.session(allow=["allowed.test"])
        assert f"@{host_ip}:{sg.proxy_port}" in sess["proxy_url"]
        inside = ["ip", "netns", "exec", name, curl, "-s", "--max-time", "5"]
        ok = sh(*inside, "-o", "/dev/null", "-w", "%{http_code}", "-x", sess["proxy_url"],
                f"http://allowed.test:{upstream.port}/from-netns", check=False)
        assert ok.stdout == "200", ok.stderr
        assert upstream.recorder.requests[-1].path == "/from-netns"
        denied = sh(*inside, "-o", "/dev/null", "-w", "%{http_code}", "-x", sess["proxy_url"],
                    f"http://other.test:{upstream.port}/", check=False)
        assert denied.stdout == "403"
        # Directly: the upstream (on the host's loopback) and the API are out of reach, and there is no route out.
        before = upstream.recorder.connections
        direct = sh(*inside, f"http://127.0.0.1:{upstream.port}/", check=False)
        assert direct.returncode != 0
        api = sh(*inside, f"http://{host_ip}:{sg.api_port}/healthz", check=False)
        assert api.returncode != 0
        route = sh("ip", "netns", "exec", name, "ip", "route", "get", "192.0.2.1", check=False)
        assert route.returncode != 0 and "unreachable" in route.stderr.lower()
        assert upstream.recorder.connections == before
