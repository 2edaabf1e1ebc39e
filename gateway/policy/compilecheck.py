"""Compile (and smoke-evaluate) a policy directory in a child process.

regopy can abort or segfault the whole process on some inputs (a semantically broken bundle when queried,
`with` on dependent rules). A reload therefore first proves in a throw-away process that the new policy
builds and evaluates; only then is it built in the gateway itself.
"""
from __future__ import annotations

import subprocess
import sys


def main(directory: str) -> int:
    import regopy

    from gateway.policy.engine import ENTRYPOINTS, PolicyError, build_bundle, evaluate_bundle
    from gateway.policy.loader import load_policy_dir

    try:
        bundle = build_bundle(load_policy_dir(directory))
        interp = regopy.Interpreter()
        for ep in ENTRYPOINTS.values():
            evaluate_bundle(interp, bundle, ep, {})
    except (PolicyError, ValueError) as exc:
        print(str(exc)[:2000], file=sys.stderr)
        return 1
    return 0


def check_in_subprocess(directory: str, timeout_s: float = 30.0) -> str | None:
    """None when the policy compiles; otherwise a short error text."""
    try:
        proc = subprocess.run([sys.executable, "-m", "gateway.policy.compilecheck", directory],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "policy compilation timed out"
    if proc.returncode == 0:
        return None
    if proc.returncode < 0:
        return f"policy compilation crashed the engine (signal {-proc.returncode})"
    return (proc.stderr.strip() or f"policy compilation failed (exit {proc.returncode})")[-2000:]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
