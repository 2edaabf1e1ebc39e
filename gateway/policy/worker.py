"""A policy worker process: compiles a policy directory once and answers evaluations over stdin/stdout.

Protocol, one JSON document per line. The first line out is `{"ready": rev}` or `{"fatal": message}`.
Requests `{"id": n, "kind": "egress", "input": {...}}` are answered `{"id": n, "value": ...}` (value null when
undefined) or `{"id": n, "error": "..."}`. regopy can abort the process on some inputs; running it here means
such a crash costs one worker (respawned) and a deny, never the gateway.
"""
from __future__ import annotations

import json
import sys


def main(directory: str) -> int:
    import regopy

    from gateway.policy.engine import ENTRYPOINTS, PolicyError, build_bundle, evaluate_bundle
    from gateway.policy.loader import load_policy_dir

    out = sys.stdout
    try:
        source = load_policy_dir(directory)
        bundle = build_bundle(source)
    except (PolicyError, ValueError) as exc:
        out.write(json.dumps({"fatal": str(exc)[:2000]}) + "\n")
        out.flush()
        return 1
    interp = regopy.Interpreter()
    out.write(json.dumps({"ready": source.rev}) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            req = json.loads(line)
            rid = req["id"]
        except (ValueError, KeyError, TypeError):
            continue
        try:
            value = evaluate_bundle(interp, bundle, ENTRYPOINTS[req["kind"]], req["input"])
            reply = {"id": rid, "value": value}
        except (PolicyError, KeyError) as exc:
            reply = {"id": rid, "error": str(exc)[:500]}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
