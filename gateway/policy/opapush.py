"""How a policy directory goes up to an OPA server over its REST API (pure helpers; opa.py does the I/O).

OPA compiles every `PUT /v1/policies/<id>` against the modules it already holds, so a module that calls a
function of another module can only go up after it, and two modules of one package that call each other's
functions can't go up one at a time at all. Modules are pushed one per file while that works; what is
left is merged, one module per package (its imports gathered at the top), and pushed as such.
"""
from __future__ import annotations

import re

POLICY_ID_PREFIX = "sandgate/"
MERGED_ID_PREFIX = "sandgate/_package/"

_PACKAGE = re.compile(r"^package\s+([\w.]+)\s*$")
_IMPORT = re.compile(r"^import\s+\S")


def policy_id(rel: str) -> str:
    return POLICY_ID_PREFIX + rel


def package_of(text: str) -> str:
    for line in text.splitlines():
        m = _PACKAGE.match(line.strip())
        if m:
            return m.group(1)
    raise ValueError("a module without a package line")


def merge_by_package(modules: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """[(rel, text)] -> [(policy id, merged text)], one per package, in first-seen order. Each module's
    `package` line is dropped and its top-level `import` lines are gathered (once each) at the top."""
    order: list[str] = []
    imports: dict[str, list[str]] = {}
    bodies: dict[str, list[str]] = {}
    for rel, text in modules:
        package = package_of(text)
        if package not in bodies:
            order.append(package)
            imports[package], bodies[package] = [], []
        kept = []
        for line in text.splitlines():
            if _PACKAGE.match(line.strip()):
                continue
            if _IMPORT.match(line):
                if line.strip() not in imports[package]:
                    imports[package].append(line.strip())
                continue
            kept.append(line)
        bodies[package].append(f"# ---- {rel}\n" + "\n".join(kept))
    return [(MERGED_ID_PREFIX + package, f"package {package}\n\n" + "\n".join(imports[package]) + "\n\n"
             + "\n\n".join(bodies[package]) + "\n") for package in order]
