"""`sandgate policy test|check|eval|replay|diff` and `sandgate audit export`: parsers and implementations.

cli.py registers these with `register(subparsers, common)` and runs them with `run(cfg, args)`. Building the
parser imports nothing heavy (every sandgate command builds it): the engine and the store load when a policy
command runs.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, TextIO

COMMANDS = ("policy", "audit")


def register(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> Any:
    """The `policy` and `audit` parsers; returns the `audit` subparsers."""
    policy = sub.add_parser("policy", help="test, check, evaluate, replay and compare policies")
    psub = policy.add_subparsers(dest="policy_cmd", required=True)
    ptest = psub.add_parser("test", help="run the *_test.rego tests (like `opa test`)")
    common(ptest)
    ptest.add_argument("dir", nargs="?")
    ptest.add_argument("-v", "--verbose", action="store_true", help="show every test and its prints")
    ptest.add_argument("--run", help="only tests whose name (data.pkg.test_x) matches this regex")
    ptest.add_argument("--coverage", action="store_true", help="per-file line coverage of the policy")
    pcheck = psub.add_parser("check", help="parse and compile; report errors with file:line")
    common(pcheck)
    pcheck.add_argument("dir", nargs="?")
    pcheck.add_argument("--strict", action="store_true", help="also OPA's strict-mode checks and METADATA annotation errors")
    peval = psub.add_parser("eval", help="decide an input document (or JSON Lines of them)")
    common(peval)
    peval.add_argument("--kind", choices=["egress", "toolcall"], help="which policy (required with --input)")
    peval.add_argument("--input", help="FILE or - : one JSON document, or JSON Lines")
    peval.add_argument("--policies", help="policy directory (default policy.dir)")
    peval.add_argument("--explain", action="store_true", help="show which rules added which items")
    add_raw_arguments(peval)
    from gateway.policy import logcommands

    return logcommands.register(psub, sub, common)


def run(cfg: Any, args: Any) -> int:
    if args.cmd == "audit" or args.policy_cmd in ("replay", "diff"):
        from gateway.policy import logcommands

        return logcommands.run(cfg, args)
    from gateway.policy.factory import policy_dir
    from gateway.policy.rego import PolicyError

    explicit = getattr(args, "dir", None) or getattr(args, "policies", None)
    directory = Path(explicit) if explicit else policy_dir(cfg.policy)
    if not explicit and args.policy_cmd in ("test", "check"):
        # Without a directory the command works on policy.dir: say which, since without --config (or
        # SANDGATE_CONFIG) that is the shipped package, not the site's copy.
        where = "policy.dir" if cfg.policy.dir else "the shipped policies: no policy.dir is configured"
        print(f"sandgate policy {args.policy_cmd}: {directory} ({where})", file=sys.stderr)
    try:
        if args.policy_cmd == "test":
            return cmd_test(directory, args, sys.stdout)
        if args.policy_cmd == "check":
            return cmd_check(directory, args.strict, sys.stdout)
        if args.policy_cmd == "eval":
            return cmd_eval(directory, args, sys.stdout)
    except (PolicyError, ValueError, OSError, re.error) as exc:
        print(f"sandgate policy: {exc}", file=sys.stderr)
        return 2 if args.policy_cmd == "test" else 1
    except Exception as exc:  # noqa: BLE001 - one line for the user, never a traceback
        print(f"sandgate policy: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    return 2


def add_raw_arguments(peval: argparse.ArgumentParser) -> None:
    """The raw-call options of `policy eval` (built in gateway/cli/policyeval.py)."""
    raw = peval.add_argument_group("a raw tool call or request, its input built as the server builds it")
    raw.add_argument("--tool", metavar="NAME", help="a tool call: the tool's name (shell, read_file, sql, ...)")
    raw.add_argument("--args", metavar="JSON", default="{}", help="the tool call's arguments, a JSON object")
    raw.add_argument("--request", metavar="'METHOD URL'",
                     help="an egress request line: 'GET https://host/path?q', 'CONNECT host:443' (method "
                          "defaults to GET)")
    raw.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'",
                     help="a request header (repeatable)")
    raw.add_argument("--session-file", metavar="FILE",
                     help="the session as `GET /v1/sessions/ID` returns it (JSON); else the flags below")
    raw.add_argument("--allow", action="append", default=[], metavar="HOST", help="the session's allow list")
    raw.add_argument("--workspace", default="/workspace", help="the session's workspace (default /workspace)")
    raw.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="a session label")
    raw.add_argument("--secret", action="append", default=[], metavar="NAME", help="a secret the session holds")
    raw.add_argument("--workload", default="ephemeral", choices=["ephemeral", "persistent"])
    raw.add_argument("--frozen", action="store_true", help="the session is frozen")
    raw.add_argument("--show-input", action="store_true", help="print the input document(s) built")


# -- test --------------------------------------------------------------------------------------------------

def cmd_test(directory: Path, args: Any, out: TextIO) -> int:
    from gateway.policy.testing import run_tests

    report = run_tests(directory, run=args.run, coverage=args.coverage)
    for r in report.results:
        if r.passed and not args.verbose:
            continue
        where = f"{r.file}:{r.line}"
        label = {"pass": "PASS", "fail": "FAIL", "error": "ERROR", "skip": "SKIP"}[r.outcome]
        detail = f" ({r.detail})" if r.detail else ""
        out.write(f"{label} {r.name} {where}{detail}\n")
        if r.prints and (args.verbose or not r.passed):
            for line in r.prints:
                out.write(f"    {line}\n")
    if args.coverage:
        out.write("coverage:\n")
        for file, cov in sorted(report.coverage.items()):
            missed = ",".join(str(n) for n in sorted(cov.not_covered))
            out.write(f"  {file}: {cov.percent:.1f}% ({len(cov.covered)}/{len(cov.covered | cov.not_covered)})"
                      f"{'  not covered: ' + missed if missed else ''}\n")
        out.write(f"  total: {report.coverage_percent():.1f}%\n")
    passed = sum(r.passed for r in report.results)
    errors = sum(r.outcome == "error" for r in report.results)
    skipped = sum(r.outcome == "skip" for r in report.results)
    failed = sum(r.outcome == "fail" for r in report.results)       # an error is counted once, as an error
    tail = (f", {skipped} skipped" if skipped else "") + (f", {errors} errors" if errors else "")
    if not report.results:
        out.write("no tests found\n")
    out.write(f"{passed} passed, {failed} failed{tail}\n")
    return report.exit_code


# -- check -------------------------------------------------------------------------------------------------

def cmd_check(directory: Path, strict: bool, out: TextIO) -> int:
    from gateway.policy.check import check_source
    from gateway.policy.loader import load_policy_dir

    source = load_policy_dir(directory)
    findings = check_source(source, strict=strict)
    for finding in findings:
        out.write(f"{finding}\n")
    if findings:
        out.write(f"{len(findings)} problems\n")
        return 1
    out.write(f"ok: {len(source.modules)} modules, {len(source.tests)} test files, rev {source.rev}\n")
    return 0


# -- eval --------------------------------------------------------------------------------------------------

def read_documents(text: str, force_lines: bool = False) -> tuple[bool, Iterator[Any]]:
    """(is_lines, documents). One JSON document, or JSON Lines (one per non-blank line); a line that is
    not JSON yields a ValueError in its place. A decision-log record contributes its `input`."""
    if not force_lines:
        try:
            return False, iter([_unwrap(json.loads(text))])
        except ValueError:
            pass

    def lines() -> Iterator[Any]:
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                yield _unwrap(json.loads(line))
            except ValueError as exc:
                yield ValueError(f"line {number}: not JSON ({exc.msg})")
    return True, lines()


def _unwrap(doc: Any) -> Any:
    if isinstance(doc, dict) and "decision_id" in doc and "input" in doc:
        return doc["input"]
    return doc


def cmd_eval(directory: Path, args: Any, out: TextIO) -> int:
    if not args.input or not args.kind:
        raise ValueError("policy eval needs --kind and --input, or a raw call: --tool NAME --args JSON, or "
                         "--request 'METHOD URL'")
    from gateway.policy.evaluator import Evaluator
    from gateway.policy.loader import load_policy_dir

    text = sys.stdin.read() if args.input == "-" else Path(args.input).read_text(encoding="utf-8")
    is_lines, docs = read_documents(text, force_lines=args.input.endswith((".jsonl", ".ndjson")))
    evaluator = Evaluator(load_policy_dir(directory))
    status = 0
    for doc in docs:
        if isinstance(doc, ValueError):
            out.write(json.dumps({"error": str(doc)}) + "\n")
            status = 1
            continue
        decision = evaluator.decide(args.kind, doc)
        result: dict = {"decision": decision}
        if args.explain:
            result["explain"] = evaluator.explain(args.kind, doc)
        if is_lines:
            out.write(json.dumps(result, sort_keys=False) + "\n")
        else:
            out.write(json.dumps(result if args.explain else decision, indent=2) + "\n")
    return status
