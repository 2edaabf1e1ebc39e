#!/usr/bin/env python3
"""Container health check: GET /healthz on the API address sandgate wrote to DATA_DIR/listen.json at start.

Exit 0 when it answers 200 with status "ok" or "degraded", 1 otherwise (not started yet, stopped, or unhealthy).
"degraded" (audit rows cannot be written yet; they wait in memory) is alive, as deploy/README.md says: a restart
would lose the waiting rows, so the check says so on stderr and passes. Whether the replica takes requests is
`/readyz`'s answer (the Kubernetes readiness probe). Reading the address from listen.json keeps the check right
whatever `api.listen` says.
"""
from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path


def health_url(listen_json: str) -> str:
    """'{"api": "0.0.0.0:8700"}' -> 'http://127.0.0.1:8700/healthz' (a wildcard address asks loopback)."""
    host, _, port = json.loads(listen_json)["api"].rpartition(":")
    host = host.strip("[]")
    host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{int(port)}/healthz"


def main() -> int:
    data_dir = Path(os.environ.get("SANDGATE_DATA_DIR", "/var/lib/sandgate"))
    try:
        url = health_url((data_dir / "listen.json").read_text())
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))   # never through a proxy
        with opener.open(url, timeout=4) as resp:
            body = json.loads(resp.read())
        ok = resp.status == 200 and body.get("status") in ("ok", "degraded")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"sandgate-healthcheck: {exc}", file=sys.stderr)
        return 1
    if not ok or body.get("status") != "ok":
        print(f"sandgate-healthcheck: {url} says {body!r}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
