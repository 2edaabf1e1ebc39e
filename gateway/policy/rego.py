"""regorus, the embedded Rego engine: build an engine from a policy source, evaluate a rule, read its errors.

A `regorus.Engine` holds its input as state and is bound to the thread that created it (using it from another
thread panics), so every thread or worker process builds or clones its own and never shares it between two
evaluations at once. regorus holds the GIL while it evaluates.
"""
from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

import regorus

from gateway.policy.loader import PolicySource

log = logging.getLogger("sandgate.policy")

ENTRY_PACKAGES = {"egress": "sandgate.egress", "toolcall": "sandgate.toolcall"}
ENTRYPOINTS = {kind: f"data.{pkg}.decision" for kind, pkg in ENTRY_PACKAGES.items()}

# regorus reports errors as "--> FILE:LINE:COL\n  |\nN | source\n  | ^\nerror: MESSAGE" followed by a Rust
# backtrace; turn that into "FILE:LINE:COL: MESSAGE".
_LOCATION = re.compile(r"-->\s*(?P<loc>\S+:\d+:\d+)")
_MESSAGE = re.compile(r"^error:\s*(?P<msg>.+)$", re.M)


_UNDEFINED_JSON = '"<undefined>"'         # how eval_rule_as_json spells an undefined value


def _settle_backtraces() -> None:
    """regorus makes its errors with anyhow, which captures a Rust backtrace for each one when RUST_BACKTRACE asks
    for backtraces and RUST_LIB_BACKTRACE is unset: about 10 us of CPU an error, and regorus makes and drops errors
    while it evaluates (an index into a function's value, a variable key into an object), for backtraces
    `error_text` drops: a tool-call decision of the corpus 0.95 -> 0.79 ms of CPU with RUST_BACKTRACE=1. Rust reads
    that choice once per process, at the first capture: one error made here under RUST_LIB_BACKTRACE=0 settles it,
    and the environment is put back as it was (what sandgate starts sees the environment it was given; a panic still
    prints RUST_BACKTRACE's backtrace). A RUST_LIB_BACKTRACE of the user's own decides as before."""
    if "RUST_LIB_BACKTRACE" in os.environ or os.environ.get("RUST_BACKTRACE", "0") == "0":
        return
    os.environ["RUST_LIB_BACKTRACE"] = "0"
    try:
        regorus.Engine().eval_query("[")
    except Exception:  # noqa: BLE001 - the error is the point: its capture settles the choice
        pass
    finally:
        del os.environ["RUST_LIB_BACKTRACE"]


_settle_backtraces()


class PolicyError(Exception):
    """The policy could not be loaded, compiled or evaluated."""


def error_text(exc: BaseException) -> str:
    """A one-line, user-facing description of a regorus error (location first when regorus gives one)."""
    text = str(exc).split("Stack backtrace:", 1)[0].strip()
    loc, msg = _LOCATION.search(text), _MESSAGE.search(text)
    if msg is None:
        return " ".join(text.split())[:500] or type(exc).__name__
    message = msg.group("msg").strip()
    return f"{loc.group('loc')}: {message}" if loc else message


def build_engine(source: PolicySource, *, tests: bool = False, coverage: bool = False) -> Any:
    """A regorus engine holding the source's modules (and its tests when asked) and data."""
    engine = regorus.Engine()
    engine.set_gather_prints(True)
    for rel, text in source.modules + (source.tests if tests else ()):
        try:
            engine.add_policy(rel, text)
        except BaseException as exc:  # noqa: BLE001 - regorus raises RuntimeError, or a pyo3 panic
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise PolicyError(error_text(exc)) from None
    try:
        engine.add_data(source.data)
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise PolicyError(f"policy data: {error_text(exc)}") from None
    if coverage:
        engine.set_enable_coverage(True)
    return engine


def prepared(engine: Any) -> Any:
    """The engine, or a clone of it, analysed for evaluation. regorus analyses the modules (rule order,
    function table) on an engine's first evaluation and `clone()` copies the engine as it is: a clone of an
    engine never evaluated redoes that analysis on its own first evaluation (about 15 ms of CPU for the shipped
    policy, against about 1 ms to run one of its tests). Callers that clone per test or per rule clone this.
    A policy whose analysis fails is returned as it is (each clone then reports the error, as before)."""
    probe = engine.clone()
    try:
        probe.eval_query("true")
    except BaseException as exc:  # noqa: BLE001 - RuntimeError or a pyo3 panic
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return engine
    return probe


def evaluate(engine: Any, rule: str, input_doc: Any, as_json: bool = False) -> Any:
    """Evaluate `rule` (a full path, `data.a.b`) against `input_doc`. None when undefined; PolicyError on error.

    `as_json` reads the value through JSON (sets become lists): needed for sets of objects, which regorus
    cannot hand to Python as a set."""
    try:
        # Through JSON, never `set_input`: regorus' Python conversion segfaults on a string holding a lone
        # surrogate (mitmproxy's surrogateescape of invalid UTF-8, a JSON "\\ud800" escape), which would kill
        # the process. Its JSON parser refuses those, and NaN/Infinity, with an error: a deny.
        text = json.dumps(input_doc, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"the input is not JSON: {exc}") from None
    try:
        engine.set_input_json(text)
        if as_json:
            text = engine.eval_rule_as_json(rule)
            value = None if text is None or text == _UNDEFINED_JSON else json.loads(text)
        else:
            value = engine.eval_rule(rule)
        _drain_prints(engine)
        return value
    except BaseException as exc:  # noqa: BLE001
        _drain_prints(engine)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        text = error_text(exc)
        if text == "not a valid rule path":
            return None
        raise PolicyError(text) from None


def _drain_prints(engine: Any) -> None:
    """print() output of the policy is gathered by the engine: hand it to the log, never let it pile up."""
    try:
        prints = engine.take_prints()
    except BaseException:  # noqa: BLE001 - an engine without gathered prints
        return
    for line in prints:
        log.debug("policy print: %s", line)


def smoke_test(engine: Any) -> None:
    """Evaluate every entry point once on an empty input: compile errors regorus reports lazily (unsafe
    variables, unknown functions, conflicting rules) surface here instead of on the first request."""
    for rule in ENTRYPOINTS.values():
        evaluate(engine.clone(), rule, {})


def compile_source(source: PolicySource) -> Any:
    """An engine for the source, analysed once (its smoke test's clones and its own first evaluation do not
    redo the analysis), its entry points evaluated once."""
    engine = prepared(build_engine(source))
    smoke_test(engine)
    return engine
