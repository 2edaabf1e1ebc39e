"""Every string of a JSON value, out and back in (for scrubbing MCP results through the API). Pure."""
from __future__ import annotations

from typing import Any, Iterator


def collect_strings(value: Any) -> list[str]:
    """The strings of `value` (object keys included), depth first, in the order `replace_strings` takes them."""
    out: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            for k, item in v.items():
                out.append(str(k))
                walk(item)
        elif isinstance(v, (list, tuple)):
            for item in v:
                walk(item)
    walk(value)
    return out


def replace_strings(value: Any, replacements: list[str]) -> Any:
    """`value` with its strings replaced, in `collect_strings` order, by `replacements`."""
    it: Iterator[str] = iter(replacements)

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return next(it)
        if isinstance(v, dict):
            return {next(it): walk(item) for _k, item in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(item) for item in v]
        return v
    out = walk(value)
    if next(it, None) is not None:
        raise ValueError("more replacements than strings")
    return out
