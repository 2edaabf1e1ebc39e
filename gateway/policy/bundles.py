"""regopy bundles: compile a policy once, evaluate an entry point, read the result safely.

regopy's own `Output` wrapper raises on error texts, its `expressions()` aborts the process on an undefined
result, and its JSON rendering does not escape strings — so results are read node by node here.
"""
from __future__ import annotations

import json
from typing import Any

import regopy
from regopy import rego_shared as _rs
from regopy.node import NodeKind

from gateway.policy.loader import PolicySource

ENTRYPOINTS = {"egress": "sandgate/egress/decision", "toolcall": "sandgate/toolcall/decision"}


class PolicyError(Exception):
    """The policy could not be loaded or compiled."""


def build_bundle(source: PolicySource, entrypoints: list[str] | None = None) -> Any:
    """Compile modules + data into a regopy bundle. Raises PolicyError on parse or semantic errors."""
    interp = regopy.Interpreter()
    try:
        for name, text in source.modules:
            interp.add_module(name, text)
        interp.add_data(source.data)
        bundle = interp.build(None, entrypoints or list(ENTRYPOINTS.values()))
    except regopy.RegoError as exc:
        raise PolicyError(f"policy does not compile: {str(exc)[:2000]}") from None
    if not bundle.ok():
        raise PolicyError("policy does not compile (semantic error; see log)")
    return bundle


def node_to_python(impl: Any) -> Any:
    """Walk a regopy result node into Python values.

    regopy's JSON rendering does not escape strings (a `"` in input yields invalid JSON), so results are
    read node by node instead.
    """
    kind = _rs.rego_node_type(impl)
    if kind in (NodeKind.Term, NodeKind.Scalar):
        return node_to_python(_rs.rego_node_get(impl, 0))
    size = _rs.rego_node_size(impl)
    if kind == NodeKind.Object:
        out = {}
        for i in range(size):
            item = _rs.rego_node_get(impl, i)
            out[node_to_python(_rs.rego_node_get(item, 0))] = node_to_python(_rs.rego_node_get(item, 1))
        return out
    if kind in (NodeKind.Array, NodeKind.Set, NodeKind.Terms):
        return [node_to_python(_rs.rego_node_get(impl, i)) for i in range(size)]
    value = _rs.rego_node_value(impl)
    if kind == NodeKind.String:
        # Strings made by builtins come back JSON-quoted; strings from input come back raw.
        if len(value) >= 2 and value[0] == value[-1] == '"':
            try:
                decoded = json.loads(value)
            except ValueError:
                return value
            return decoded if isinstance(decoded, str) else value
        return value
    if kind == NodeKind.Int:
        return int(value)
    if kind == NodeKind.Float:
        return float(value)
    if kind in (NodeKind.Boolean, NodeKind.True_, NodeKind.False_):
        return value == "true"
    if kind == NodeKind.Null:
        return None
    raise PolicyError(f"unexpected result node kind {kind}")


def evaluate_bundle(interp: Any, bundle: Any, entrypoint: str, input_doc: dict) -> Any:
    """One evaluation. Returns the value, or None when undefined. Raises PolicyError on engine errors.

    Uses regopy's low-level calls: its `Output` wrapper raises on error texts and `expressions()` aborts
    the process on an undefined result.
    """
    interp.set_input(regopy.Input(input_doc))
    try:
        impl = _rs.rego_bundle_query_entrypoint(interp._impl, bundle._impl, entrypoint)
    except Exception as exc:  # noqa: BLE001 - regopy raises RegoError or others for missing plans
        raise PolicyError(f"evaluation error: {str(exc)[:300]}") from None
    try:
        text = _rs.rego_output_string(impl)
        if not _rs.rego_output_ok(impl) or text.lstrip().startswith("(error"):
            raise PolicyError(f"evaluation error: {_error_message(text)}")
        if text.strip() == "undefined":
            return None
        values = node_to_python(_rs.rego_output_expressions_at_index(impl, 0))
    finally:
        _rs.rego_free_output(impl)
    return values[0] if values else None


def _error_message(text: str) -> str:
    import re

    found = re.findall(r"\(errormsg \d+:([^)]*)\)", text)
    return "; ".join(found)[:500] or text[:200]
