"""deploy/netns/sandbox-netns.sh, run as an operator runs it (root, iproute2): the namespace it makes reaches
the host address on its link and nothing else, and `down` removes it all. (Its iptables rules run only where
iptables is installed; the full proxy path through such a namespace is tests/gateway/egress/test_netns_e2e.py.)
"""
from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys

import pytest

from tests.conftest import need
from tests.deploy.recipes import DEPLOY

SCRIPT = DEPLOY / "netns" / "sandbox-netns.sh"

PROBE = """
import socket, sys
s = socket.socket(); s.settimeout(2)
try:
    s.connect((sys.argv[1], int(sys.argv[2]))); print("connected")
except OSError as exc:
    print(type(exc).__name__)
"""


def sh(*args, check=True):
    return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=30)


@pytest.fixture
def namespace():
    need(os.geteuid() == 0 and shutil.which("ip") is not None, "root and iproute2 for network namespaces")
    tag = secrets.token_hex(3)
    name = f"sgd{tag}"
    octet = int(tag[:2], 16) % 250 + 1
    host_ip, ns_ip = f"10.201.{octet}.1", f"10.201.{octet}.2"
    up = subprocess.run(["bash", str(SCRIPT), "up", name, host_ip, ns_ip], capture_output=True, text=True,
                        timeout=30)
    if up.returncode != 0:
        subprocess.run(["bash", str(SCRIPT), "down", name], capture_output=True, timeout=30)
        need(False, f"network namespaces ({up.stderr.strip()})")
    yield name, host_ip
    subprocess.run(["bash", str(SCRIPT), "down", name], capture_output=True, timeout=30)


def probe(name: str, host: str, port: int) -> str:
    return sh("ip", "netns", "exec", name, sys.executable, "-c", PROBE, host, str(port)).stdout.strip()


def test_the_namespace_reaches_the_proxy_address_and_nothing_else(namespace):
    name, host_ip = namespace
    assert "default" not in sh("ip", "netns", "exec", name, "ip", "route").stdout
    with socket.socket() as proxy, socket.socket() as other:
        proxy.bind((host_ip, 0))
        proxy.listen()
        other.bind(("127.0.0.1", 0))                  # the host's loopback: another world from in there
        other.listen()
        assert probe(name, host_ip, proxy.getsockname()[1]) == "connected"
        assert probe(name, "127.0.0.1", other.getsockname()[1]) == "ConnectionRefusedError"
        for unreachable in ("10.201.0.99", "169.254.169.254", "192.0.2.1"):
            assert probe(name, unreachable, 80) in ("OSError", "TimeoutError"), unreachable


def test_down_removes_namespace_and_link(namespace):
    name, _ = namespace
    sh("bash", str(SCRIPT), "down", name)
    assert name not in sh("ip", "netns", "list").stdout
    assert sh("ip", "link", "show", f"h-{name}", check=False).returncode != 0
