"""Loading a policy directory: Rego modules plus data files, OPA bundle convention.

`DIR/a/b/data.json` (or data.yaml) becomes `data.a.b`. `*_test.rego` files are loaded only for tests.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def default_policy_dir() -> Path:
    import sandgate_policies

    return Path(sandgate_policies.__file__).resolve().parent


@dataclass(frozen=True)
class PolicySource:
    root: Path
    modules: tuple[tuple[str, str], ...]       # (relative path, source)
    tests: tuple[tuple[str, str], ...]
    data: dict
    rev: str
    data_docs: tuple[tuple[str, Any], ...] = ()   # ("a/b", value of DIR/a/b/data.json): OPA bundle layout


def _load_yaml(text: str) -> Any:
    from ruamel.yaml import YAML

    return YAML(typ="safe").load(text)


def _set_path(root: dict, parts: list[str], value: Any, origin: str) -> None:
    node = root
    for part in parts[:-1] if parts else []:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ValueError(f"{origin}: data path conflicts with a non-object")
    if not parts:
        if not isinstance(value, dict):
            raise ValueError(f"{origin}: top-level data must be an object")
        _deep_merge(root, value, origin)
        return
    key = parts[-1]
    if isinstance(node.get(key), dict) and isinstance(value, dict):
        _deep_merge(node[key], value, origin)
    elif key in node:
        raise ValueError(f"{origin}: data.{'.'.join(parts)} defined twice")
    else:
        node[key] = value


def _deep_merge(dst: dict, src: dict, origin: str) -> None:
    for k, v in src.items():
        if isinstance(dst.get(k), dict) and isinstance(v, dict):
            _deep_merge(dst[k], v, origin)
        elif k in dst:
            raise ValueError(f"{origin}: key {k!r} defined twice")
        else:
            dst[k] = v


def policy_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".rego", ".json", ".yaml", ".yml")
                  and not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(root).parts))


def load_policy_dir(root: str | Path, require_modules: bool = True) -> PolicySource:
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"policy directory {root} does not exist")
    digest = hashlib.sha256()
    modules, tests, data, docs = [], [], {}, []
    for path in policy_files(root):
        rel = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8-sig")     # a leading BOM is not part of the module
        digest.update(rel.encode() + b"\0" + text.encode() + b"\0")
        if path.suffix == ".rego":
            (tests if path.name.endswith("_test.rego") else modules).append((rel, text))
        elif path.stem == "data":
            try:
                value = json.loads(text) if path.suffix == ".json" else _load_yaml(text)
            except Exception as exc:  # noqa: BLE001 - report any parse failure as a policy error
                raise ValueError(f"{rel}: cannot parse data: {exc}") from None
            parts = list(path.relative_to(root).parent.parts)
            _set_path(data, parts, value, rel)
            docs.append(("/".join(parts), value))
    if not modules and (require_modules or not tests):
        raise ValueError(f"policy directory {root} holds no .rego modules")
    return PolicySource(root, tuple(modules), tuple(tests), data, digest.hexdigest()[:12], tuple(docs))
