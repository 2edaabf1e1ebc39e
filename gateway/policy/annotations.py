"""`# METADATA` annotations in Rego, read and checked as OPA reads them (pure: text in, annotations and
problems out).

A block starts at a comment line `# METADATA`; the comment lines right after it, with the `#` taken off, are
one YAML document, a mapping of OPA's keys (`scope`, `title`, `description`, `related_resources`, `authors`,
`organizations`, `schemas`, `entrypoint`, `custom`). It annotates the rule or package on the line that follows.
The shipped entry packages annotate their rules with `title`, `description` and `custom.code` (the decision
code the rule adds). `sandgate policy check --strict` prints what is wrong with a block.
"""
from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

KEYS = frozenset({"scope", "title", "description", "related_resources", "authors", "organizations", "schemas",
                  "entrypoint", "custom"})
SCOPES = frozenset({"rule", "document", "package", "subpackages"})
_START = re.compile(r"^\s*#\s*METADATA\s*$")
_COMMENT = re.compile(r"^\s*#(.*)$")
_PACKAGE = re.compile(r"^\s*package\s")
_IMPORT = re.compile(r"^\s*import\s")
_CODE = re.compile(r"^[a-z][a-z0-9_]*(\.[A-Za-z0-9_]+)+$")          # area.name (`address.CLASS`: a pattern)


@dataclass(frozen=True)
class Annotation:
    line: int                  # the `# METADATA` line (1-based)
    target: int                # the line it annotates
    data: dict[str, Any]


@dataclass(frozen=True)
class Problem:
    line: int
    message: str


def _yaml(text: str) -> Any:
    return YAML(typ="safe", pure=True).load(io.StringIO(text))


def _dedent(lines: list[str]) -> str:
    indents = [len(t) - len(t.lstrip(" ")) for t in lines if t.strip()]
    cut = min(indents) if indents else 0
    return "\n".join(t[cut:] for t in lines) + "\n"


def _check(data: Any, target_text: str) -> list[str]:
    if not isinstance(data, dict):
        return ["a METADATA block must be a YAML mapping"]
    out = [f"unknown METADATA key {key!r} (known: {', '.join(sorted(KEYS))})" for key in data if key not in KEYS]
    scope = data.get("scope", "rule")
    if scope not in SCOPES:
        out.append(f"METADATA scope {scope!r} is not one of {', '.join(sorted(SCOPES))}")
    elif scope in ("package", "subpackages") and not _PACKAGE.match(target_text):
        out.append(f"METADATA scope {scope} must annotate a package line")
    elif scope in ("rule", "document") and _PACKAGE.match(target_text) and "scope" in data:
        out.append(f"METADATA scope {scope} cannot annotate a package line")
    for key in ("title", "description"):
        if key in data and not isinstance(data[key], str):
            out.append(f"METADATA {key} must be a string")
    if "custom" in data and not isinstance(data["custom"], dict):
        out.append("METADATA custom must be a mapping")
    elif "code" in data.get("custom", {}) and not (isinstance(data["custom"]["code"], str)
                                                  and _CODE.match(data["custom"]["code"])):
        out.append(f"METADATA custom.code must be a decision code such as egress.not_allowlisted, got "
                   f"{str(data['custom']['code'])[:60]!r}")
    if "entrypoint" in data and not isinstance(data["entrypoint"], bool):
        out.append("METADATA entrypoint must be true or false")
    return out


def read_annotations(text: str) -> tuple[list[Annotation], list[Problem]]:
    """Every METADATA block of a module's source, and what is wrong with those that are wrong."""
    lines = text.splitlines()
    annotations, problems = [], []
    i = 0
    while i < len(lines):
        if not _START.match(lines[i]):
            i += 1
            continue
        start, body, i = i + 1, [], i + 1
        while i < len(lines) and (m := _COMMENT.match(lines[i])) and not _START.match(lines[i]):
            body.append(m.group(1))
            i += 1
        target_text = lines[i] if i < len(lines) else ""
        if not target_text.strip() or _START.match(target_text) or _IMPORT.match(target_text):
            problems.append(Problem(start, "a METADATA block must be followed directly by a rule or package"))
            continue
        try:
            data = _yaml(_dedent(body))
        except YAMLError as exc:
            problems.append(Problem(start, "METADATA is not valid YAML: " + " ".join(str(exc).split())[:200]))
            continue
        wrong = _check(data, target_text)
        problems.extend(Problem(start, message) for message in wrong)
        if not wrong:
            annotations.append(Annotation(start, i + 1, data))
    return annotations, problems
