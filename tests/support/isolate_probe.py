"""Run inside `unshare -n -m` (loopback only, private mounts): `sandgate run --isolate` end to end.

This process's network namespace plays the host: it holds the upstreams (on its loopback), sandgate (with its
transparent listener and filtering resolver) and the nftables tables `run --isolate` installs; each run makes
its own sandbox namespace inside it. Nothing but loopback and the runs' veth pairs exists here, so even a bug
could not send a packet off the machine, and whatever a failing run leaves behind dies with this namespace.
Prints one JSON object: {case: {"rc", "out", "err", ...}} plus what was left over and what the upstreams saw.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[2])     # the checkout, as `python -m` would have it, not this folder

from tests.support import netns  # noqa: E402
from tests.support.gateway import Sandgate, gateway_cli  # noqa: E402
from tests.support.upstream import EchoServer, Upstream, free_port, make_cert  # noqa: E402

SECRET = "ghp_" + "R" * 36
PY = sys.executable
# The whole probe's time, and one run's at most. tests/gateway/test_isolate_e2e.py waits longer for the probe (and
# pytest longer still), so a run that hangs ends here, named, with what the probe saw so far on stderr.
BUDGET_S = 420.0
RUN_TIMEOUT_S = 120.0

# A raw client: no proxy, no library, just a socket to NAME:PORT (resolved in the sandbox).
RAW_GET = ("import socket,sys\n"
           "s=socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=10)\n"
           "s.sendall(b'GET /raw HTTP/1.1\\r\\nHost: '+sys.argv[1].encode()+b':'+sys.argv[2].encode()+"
           "b'\\r\\nConnection: close\\r\\n\\r\\n')\n"
           "data=b''\n"
           "while True:\n"
           "    try: chunk=s.recv(65536)\n"
           "    except OSError as e: print('error', type(e).__name__); break\n"
           "    if not chunk: break\n"
           "    data+=chunk\n"
           "print(data.split(b'\\r\\n',1)[0].decode() if data else 'closed')\n")

# Raw bytes (not HTTP, not TLS) to NAME:PORT: what comes back, or "closed".
RAW_BYTES = ("import socket,sys\n"
             "s=socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=10)\n"
             "s.sendall(b'\\x00\\x01raw bytes')\n"
             "try: print(s.recv(100) or 'closed')\n"
             "except OSError as e: print('closed', type(e).__name__)\n")

# Resolve names inside the sandbox; "-" for a name that does not resolve.
RESOLVE = ("import socket,sys\n"
           "for n in sys.argv[1:]:\n"
           "    try: print(n, sorted({i[4][0] for i in socket.getaddrinfo(n, 80, type=socket.SOCK_STREAM)}))\n"
           "    except socket.gaierror as e: print(n, '-')\n")

# Ask DNS servers directly (any address: port 53 is captured), one line per query (SERVER NAME TYPE ...): rcode and
# answers. One process for all the queries: dnspython's import is most of a process's CPU (about 0.15 s).
DIG = ("import sys, dns.message, dns.query, dns.rcode\n"
       "for server, name, qtype in zip(sys.argv[1::3], sys.argv[2::3], sys.argv[3::3]):\n"
       "    q=dns.message.make_query(name, qtype)\n"
       "    try:\n"
       "        r=dns.query.udp(q, server, timeout=3)\n"
       "        print(dns.rcode.to_text(r.rcode()), [str(rd) for rrs in r.answer for rd in rrs], flush=True)\n"
       "    except Exception as e: print('noanswer', type(e).__name__, flush=True)\n")

# UDP to a port that is not DNS: dropped (no answer ever).
UDP = ("import socket\n"
       "s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)\n"
       "s.sendto(b'hello', ('192.0.2.10', 9999))\n"
       "try: print('answered', s.recvfrom(100))\n"
       "except OSError as e: print('noanswer')\n")

# File an access request from inside over plain HTTP (body, then status), then read it back over HTTPS (status).
INTERNAL_FILE = ("out=$(curl -s -S --max-time 10 -H 'Content-Type: application/json' "
                 "-d '{\"host\": \"api.partner.test\", \"reason\": \"the partner API\"}' -w '\\n%{http_code}' "
                 "http://sandgate.internal/v1/access-requests); echo \"$out\"; "
                 "id=$(echo \"$out\" | head -1 | sed 's/.*\"id\": *\"\\([^\"]*\\)\".*/\\1/'); "
                 "curl -s -S --max-time 10 @CA@ -o /dev/null -w '%{http_code}' "
                 "\"https://sandgate.internal/v1/access-requests/$id\"")

# File, try the host (not resolvable yet; then tell the approver, who waits for that), wait for the decision, then GET
# under the grant, POST and /admin.
INTERNAL_GRANTED = ("id=$(curl -s -S --max-time 10 -d '{\"host\": \"api.partner.test\", \"reason\": \"r\"}' "
                    "http://sandgate.internal/v1/access-requests | sed 's/.*\"id\": *\"\\([^\"]*\\)\".*/\\1/'); "
                    "curl -s --max-time 10 -o /dev/null -w '%{http_code} ' @BASE@/v1/x; touch @TRIED@; "
                    "curl -s --max-time 70 -o /dev/null -w '%{http_code} ' "
                    "\"http://sandgate.internal/v1/access-requests/$id?wait=60\"; "
                    "curl -s --max-time 10 -o /dev/null -w '%{http_code} ' @BASE@/v1/x; "
                    "curl -s --max-time 10 -o /dev/null -w '%{http_code} ' -d x @BASE@/v1/x; "
                    "curl -s --max-time 10 -o /dev/null -w '%{http_code}' @BASE@/admin")


def approve_access(sg: Sandgate, token: str, host: str, tried: Path) -> None:
    """An approver narrowing the first pending access request for `host` to GET under /v1/, once the sandbox has
    made its first try (the file `tried` exists; a busy machine must not let the approval come first), within
    RUN_TIMEOUT_S."""
    deadline = time.time() + RUN_TIMEOUT_S
    while time.time() < deadline and not tried.exists():
        time.sleep(0.2)
    while time.time() < deadline:
        for item in sg.call("GET", "/v1/approvals?kind=access&status=pending", token).json():
            if item["action"]["grant"]["host"] == host:
                sg.call("POST", f"/v1/approvals/{item['id']}/approve", token,
                        json={"reason": "ok", "grant": {"methods": ["GET"], "path_prefix": "/v1/"}})
                return
        time.sleep(0.2)


def sh(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=kw.pop("timeout", 60), **kw)


def leftovers() -> dict:
    return {"netns": [n for n in sh("ip", "netns", "list").stdout.split() if n.startswith("sandgate-")],
            "links": [l for l in sh("ip", "-o", "link").stdout.split() if l.startswith("sgi")],
            "tables": [t for t in sh("nft", "list", "tables").stdout.split() if t.startswith("sandgate_")],
            "etc": sorted(p.name for p in Path("/etc/netns").glob("sandgate-*")) if Path("/etc/netns").exists()
            else []}


class OutOfTime(Exception):
    pass


def main(tmp: Path) -> int:
    deadline = time.monotonic() + BUDGET_S
    # sandgate and the `sandgate run` processes fork from a zygote of this probe's (tests/support/zygote.py), as
    # in the test process: sandgate's imports once, not once for it and again for each of the 17 runs. A probe
    # forked from the test process's zygote (in namespaces of its own: tests/gateway/test_isolate_e2e.py) has them
    # imported already, and forks its zygote from itself, before it starts any thread.
    netns.enter()
    sh("ip", "link", "set", "lo", "up")
    cert = make_cert(tmp / "certs", ["secure.test", "allowed.test"])
    results: dict = {}
    with Upstream() as plain, Upstream(tls=cert) as secure, EchoServer() as echo:
        config = {
            "proxy": {"transparent_listen": f"127.0.0.1:{free_port()}", "dns_listen": f"127.0.0.1:{free_port()}"},
            "egress": {"private_allow": ["127.0.0.0/8"], "upstream_ca": cert.cert,
                       "raw_tcp": [f"allowed.test:{echo.port}"],
                       "resolve": {"allowed.test": ["127.0.0.1"], "secure.test": ["127.0.0.1"],
                                   "api.partner.test": ["127.0.0.1"],
                                   "other.test": ["127.0.0.1"]}},
            "secrets": {"demo": {"source": "env:SANDGATE_TEST_DEMO", "hosts": ["secure.test"], "env": "DEMO_TOKEN"}},
        }
        with Sandgate(tmp / "gw", config, env={"SANDGATE_TEST_DEMO": SECRET}) as sg:
            results["isolation"] = netns.isolation(sg.proc.pid)     # before any run has made its veth pair
            # each run leaves without tearing its modules down (gateway_cli's default, SANDGATE_TEST_QUICK_EXIT,
            # docs/testing.md): its namespace, session and CA file are removed before it returns its status
            env = {**os.environ, "SANDGATE_TOKEN": sg.harness_token}
            env.pop("HTTPS_PROXY", None)

            def run(case: str, script: str, *extra: str) -> None:
                cmd = [PY, "-m", "gateway", "run", "--api-url", sg.api, "--isolate", "--allow", "allowed.test",
                       "--allow", "secure.test", *extra, "--", "sh", "-c", script]
                timeout = min(RUN_TIMEOUT_S, deadline - time.monotonic())
                if timeout <= 0:
                    raise OutOfTime(f"the probe used its {BUDGET_S:.0f} s before the case {case!r}; done: "
                                    f"{sorted(results)}")
                try:
                    proc = gateway_cli(*cmd[3:], env=env, timeout=timeout, cwd=tmp)
                except subprocess.TimeoutExpired as exc:
                    raise OutOfTime(f"the case {case!r} did not end in {timeout:.0f} s; its output so far: "
                                    f"{exc.stdout!r} {exc.stderr!r}") from None
                results[case] = {"rc": proc.returncode, "out": proc.stdout, "err": proc.stderr}

            ca = "--cacert \"$CURL_CA_BUNDLE\""
            run("https_noproxy", f"curl -s -S --noproxy '*' {ca} -o /dev/null -w '%{{http_code}}' "
                                 f"https://secure.test:{secure.port}/isolated-tls")
            run("raw_socket", f"{PY} -c \"$0\" allowed.test {plain.port}".replace("$0", RAW_GET.replace('"', '\\"')))
            run("env", "env | sort")
            run("raw_tcp", f"{PY} -c \"{RAW_BYTES}\" allowed.test {echo.port}; "
                           f"{PY} -c \"{RAW_BYTES}\" allowed.test {plain.port}")
            run("exit_code", "exit 7")
            run("resolve", f"{PY} -c \"{RESOLVE}\" allowed.test secure.test evil.test localhost.evil.test "
                           f"127.0.0.1.nip.io")
            run("dig", f"{PY} -c \"{DIG}\" " + " ".join(" ".join(query) for query in (
                ("10.200.0.1", "allowed.test", "A"), ("192.0.2.53", "allowed.test", "A"),
                ("10.200.0.1", "evil.test", "A"), ("192.0.2.53", "evil.test", "A"),
                ("10.200.0.1", "allowed.test", "AAAA"), ("10.200.0.1", "evil.test", "TXT"))))
            run("denied_name", f"curl -s -S --noproxy '*' http://evil.test:{plain.port}/ ; echo \" rc=$?\"")
            run("direct_ip", f"curl -s -S --max-time 10 http://192.0.2.10:{plain.port}/direct; echo \" rc=$?\"; "
                             f"curl -s -S --max-time 10 {ca} --resolve secure.test:{secure.port}:192.0.2.10 "
                             f"https://secure.test:{secure.port}/direct-sni; echo \" rc=$?\"; "
                             f"curl -s -S --max-time 10 http://10.200.0.1:{sg.api_port}/healthz; echo \" rc=$?\"")
            run("udp", f"{PY} -c \"{UDP}\"")
            run("host_mismatch", f"curl -s {ca} -H 'Host: allowed.test' https://secure.test:{secure.port}/mismatch"
                                 f" -o /dev/null -w '%{{http_code}}'")
            run("secret", f"curl -s {ca} -H \"Authorization: Bearer $DEMO_TOKEN\" "
                          f"https://secure.test:{secure.port}/with-secret -o /dev/null -w '%{{http_code}} '; "
                          f"curl -s {ca} -H \"Authorization: Bearer $DEMO_TOKEN\" "
                          f"http://allowed.test:{plain.port}/exfil -o /dev/null -w '%{{http_code}}'", "--secret", "demo")
            # transparent mode's 403s carry the access endpoint too: plain HTTP, and inside intercepted TLS
            run("denied_bodies", f"curl -s -H \"Authorization: Bearer $DEMO_TOKEN\" "
                                 f"http://allowed.test:{plain.port}/exfil; echo; "
                                 f"curl -s {ca} -H 'Host: allowed.test' https://secure.test:{secure.port}/mismatch",
                "--secret", "demo")
            run("denied_line", f"curl -s -S --max-time 10 http://other.test:{plain.port}/ ; "
                               f"curl -s --max-time 10 -o /dev/null http://192.0.2.10/ ; exit 3")
            # sandgate.internal from inside: no proxy credentials, the source binding names the session
            run("internal", INTERNAL_FILE.replace("@CA@", ca))
            filed = results["internal"]["out"].splitlines()[0] if results["internal"]["out"] else "{}"
            aid = json.loads(filed).get("id", "none")
            run("internal_other", f"curl -s --max-time 10 -w ' %{{http_code}}' "
                                  f"http://sandgate.internal/v1/access-requests/{aid}")
            results["access"] = [{"session": a["session"], "status": a["status"], "host": a["action"]["grant"]["host"]}
                                 for a in sg.call("GET", "/v1/approvals?kind=access").json()]
            # ... and once a person approves (narrowed to GET under /v1/), the granted name resolves and is decided
            approver = sg.token("approver", "alice")
            tried = tmp / "granted.tried"
            approving = threading.Thread(target=approve_access, args=(sg, approver, "api.partner.test", tried),
                                         daemon=True)
            approving.start()
            run("granted", INTERNAL_GRANTED.replace("@BASE@", f"http://api.partner.test:{plain.port}")
                .replace("@TRIED@", str(tried)))
            approving.join(timeout=5)
            run("bad_secret", "true", "--secret", "nope")        # refused after the namespace was made: removed
            sessions = sg.call("GET", "/v1/sessions").json()
            results["sessions"] = [{"status": s["status"], "source": s.get("source")} for s in sessions]
            results["events"] = [{"host": e["host"], "method": e["method"], "action": e["action"],
                                  "codes": e["codes"]} for s in sessions for e in sg.events(s["id"])
                                 if e["kind"] == "egress"]
        results["echo_connections"] = echo.connections
        results["plain_paths"] = [r.path for r in plain.recorder.requests]
        results["secure_seen"] = [[r.path, r.headers.get("authorization", "")] for r in secure.recorder.requests]
    results["leftovers"] = leftovers()
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
