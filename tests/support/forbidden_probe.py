"""Run inside `unshare -n -m` (loopback only, private mounts): ask sandgate for forbidden destinations.

The names resolve through a bind-mounted /etc/hosts to metadata, private, CGNAT and other non-public
addresses. Nothing but loopback exists in this network namespace, so even a sandgate bug could not send a
packet to them. Prints one JSON object: {"results": {url: [status, code]}, "isolation": ...} (tests/support/netns.py:
the test forks this probe from its zygote where it can, and the probe's sandgate forks from a zygote of its own).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import requests

sys.path[0] = str(Path(__file__).resolve().parents[2])     # the checkout, as `python -m` would have it, not this folder

from tests.support import netns  # noqa: E402
from tests.support.gateway import Sandgate  # noqa: E402

HOSTS = {"meta.test": "169.254.169.254", "internal.test": "10.1.2.3", "router.test": "192.168.1.1",
         "cgnat.test": "100.64.0.1", "v6meta.test": "fd00:ec2::254", "zero.test": "0.0.0.0"}


def main(tmp: Path) -> int:
    netns.enter()
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    hosts = tmp / "hosts"
    hosts.write_text("127.0.0.1 localhost\n::1 localhost\n" +
                     "".join(f"{ip} {name}\n" for name, ip in HOSTS.items()))
    subprocess.run(["mount", "--bind", str(hosts), "/etc/hosts"], check=True)
    results = {}
    with Sandgate(tmp / "gw", {}) as sg:
        isolation = netns.isolation(sg.proc.pid)
        sess = sg.session(allow=list(HOSTS) + ["169.254.169.254", "10.1.2.3", "[fd00:ec2::254]"])
        urls = [f"http://{name}/latest/meta-data/" for name in HOSTS] + [
            "http://169.254.169.254/latest/meta-data/", "http://0xA9FEA9FE/", "http://2852039166/",
            "http://10.1.2.3/", "http://[fd00:ec2::254]/", "http://[::ffff:169.254.169.254]/"]
        for url in urls:
            try:
                resp = requests.get(url, proxies=sess["proxies"], timeout=10)
                code = resp.json().get("code") if resp.headers.get("content-type", "").startswith(
                    "application/json") else None
                results[url] = [resp.status_code, code]
            except requests.RequestException as exc:
                results[url] = [0, type(exc).__name__]
    print(json.dumps({"results": results, "isolation": isolation}))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
