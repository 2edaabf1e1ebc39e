"""A policy worker process: compiles a policy directory once and answers evaluations over stdin/stdout.

Protocol, one JSON document per line. The first line out is `{"ready": rev}` or `{"fatal": message}`.
Requests `{"id": n, "kind": "egress", "input": {...}}` are answered `{"id": n, "value": ...}` (value null when
undefined) or `{"id": n, "error": "..."}`. regorus holds the GIL while it evaluates and cannot be interrupted:
running it here means a runaway evaluation costs one worker (killed on timeout, respawned) and a deny, and
never stalls the gateway's event loop.
"""
from __future__ import annotations

import json
import sys


def main(directory: str) -> int:
    from gateway.policy.loader import load_policy_dir
    from gateway.policy.rego import ENTRYPOINTS, PolicyError, compile_source, evaluate

    out = sys.stdout
    try:
        source = load_policy_dir(directory)
        engine = compile_source(source)
    except (PolicyError, ValueError) as exc:
        out.write(json.dumps({"fatal": str(exc)[:2000]}) + "\n")
        out.flush()
        return 1
    out.write(json.dumps({"ready": source.rev}) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            req = json.loads(line)
            rid = req["id"]
        except (ValueError, KeyError, TypeError):
            continue
        try:
            value = evaluate(engine, ENTRYPOINTS[req["kind"]], req["input"])
            reply = json.dumps({"id": rid, "value": value})
        except (PolicyError, KeyError) as exc:
            reply = json.dumps({"id": rid, "error": str(exc)[:500]})
        except (TypeError, ValueError):             # a value JSON cannot carry: a malformed decision
            reply = json.dumps({"id": rid, "value": "unserialisable"})
        out.write(reply + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
