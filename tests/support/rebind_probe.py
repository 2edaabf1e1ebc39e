"""Run inside `unshare -n -m` (loopback only, private mounts): DNS rebinding between sandgate's check and its dial.

A tiny DNS server on 127.0.0.1:53 (the namespace's only resolver, through a bind-mounted /etc/resolv.conf) answers
`rebind.test` with 127.0.0.1 (allowed here: egress.private_allow covers loopback) for the first A query, then
169.254.169.254 (the metadata address) for every later one. Nothing but loopback exists in this namespace, so
even a sandgate bug could not send a packet to 169.254.169.254: a dial there fails with "unreachable", while
sandgate's guard refuses it by name. Prints one JSON object, with "isolation" (tests/support/netns.py: the test
forks this probe from its zygote where it can, and the probe's sandgate forks from a zygote of its own).
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import dns.message
import dns.rdatatype
import dns.rrset
import requests

sys.path[0] = str(Path(__file__).resolve().parents[2])     # the checkout, as `python -m` would have it, not this folder

from tests.support import netns  # noqa: E402
from tests.support.gateway import Sandgate  # noqa: E402
from tests.support.upstream import Upstream  # noqa: E402


class RebindingDns:
    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 53))
        self.a_queries = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            data, peer = self.sock.recvfrom(4096)
            query = dns.message.from_wire(data)
            reply = dns.message.make_response(query)
            question = query.question[0]
            if question.name.to_text().rstrip(".") == "rebind.test" and question.rdtype == dns.rdatatype.A:
                self.a_queries += 1
                address = "127.0.0.1" if self.a_queries == 1 else "169.254.169.254"
                reply.answer.append(dns.rrset.from_text(question.name, 0, "IN", "A", address))
            self.sock.sendto(reply.to_wire(), peer)


def main(tmp: Path) -> int:
    netns.enter()                   # before the DNS server's thread: a forked probe forks its zygote from itself
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    (tmp / "resolv.conf").write_text("nameserver 127.0.0.1\noptions attempts:1 timeout:2\n")
    (tmp / "hosts").write_text("127.0.0.1 localhost\n")
    subprocess.run(["mount", "--bind", str(tmp / "resolv.conf"), "/etc/resolv.conf"], check=True)
    subprocess.run(["mount", "--bind", str(tmp / "hosts"), "/etc/hosts"], check=True)
    dns_server = RebindingDns()
    out: dict = {}
    with Upstream() as up, Sandgate(tmp / "gw", {"egress": {"private_allow": ["127.0.0.0/8"]}}) as sg:
        out["isolation"] = netns.isolation(sg.proc.pid)
        sess = sg.session(allow=["rebind.test"])
        # Two requests, each on a new connection (no keep-alive between them): the first is resolved once, and
        # the dial goes to the address that was checked; the second (the answer's TTL is 0) is resolved again,
        # gets the metadata address, and is refused by name before any dial.
        for label in ("first", "second"):
            try:
                resp = requests.get(f"http://rebind.test:{up.port}/", proxies=sess["proxies"], timeout=20,
                                    headers={"Connection": "close"})
                out[label] = {"status": resp.status_code, "body": resp.text[:500]}
            except requests.RequestException as exc:
                out[label] = {"status": 0, "body": type(exc).__name__}
            out[label]["a_queries"] = dns_server.a_queries
            out[label]["upstream_saw"] = len(up.recorder.requests)
        out["events"] = [{k: e.get(k) for k in ("kind", "action", "codes", "detail")} for e in sg.events(sess["id"])
                         if e["kind"] == "egress"]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
