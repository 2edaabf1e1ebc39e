"""`sandgate ...` in this process: the same `gateway.cli.main` a `python -m gateway` process runs, its stdout,
stderr (and stdin) redirected, returned as a `subprocess.CompletedProcess`.

For tests that check what a command decides or prints, not how the process is wired: a CLI process costs about
1 s of CPU importing sandgate, this costs the command's own work. Each command keeps at least one test that
runs the real process (its entry point, exit status, streams)."""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys


def run_cli(*args: str, stdin: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """`sandgate ARGS` in process; `env` adds variables for the call's length (an empty value as in the
    process's environment, a variable set to "")."""
    from gateway.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_env = {k: os.environ.get(k) for k in (env or {})}
    saved_stdin = sys.stdin
    os.environ.update(env or {})
    sys.stdin = io.StringIO(stdin or "")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:         # argparse's usage errors
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.stdin = saved_stdin
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return subprocess.CompletedProcess(["sandgate", *args], code, out.getvalue(), err.getvalue())
