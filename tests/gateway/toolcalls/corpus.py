"""The tool-call corpus (corpus.yaml) and an in-process session that decides its calls the way the API does.

`SessionSim.call` builds the input with `enrich_toolcall` (history from the calls decided so far, links and
files the earlier calls left), decides it with the shipped policy on the shipped engine (`Evaluator`, the
gateway's decision rules: anything malformed denies), and records what the API records (the audit facts of
the call, its links and files unless denied).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import ruamel.yaml
from ruamel.yaml import YAML

from gateway.policy.evaluator import Evaluator
from gateway.policy.loader import load_policy_dir
from gateway.toolcalls.enrich import enrich_toolcall
from gateway.toolcalls.history import audit_facts, history_entries, path_rows, paths_from_rows
from gateway.toolcalls.tables import tables_of_policy

HERE = Path(__file__).resolve().parent
POLICY_DIR = HERE.parents[2] / "policies"
SESSION = {"id": "s-corpus", "workload": "persistent", "created_at": 0.0, "labels": {}, "frozen": False,
           "allow": ["example.com", "*.example.com"], "workspace": "/workspace", "secrets": []}


CACHE = Path(os.environ.get("SANDGATE_TEST_CACHE") or Path.home() / ".cache" / "sandgate-tests")


def load_corpus() -> dict[str, list[dict]]:
    """corpus.yaml as ruamel's safe loader reads it. Every xdist worker's collection imports test_corpus.py, and
    the pure-Python loader takes about 0.8 s of CPU for it: what it read is kept as JSON under CACHE, keyed by the
    file's bytes and ruamel's version, and only kept when JSON gives back exactly the same document."""
    text = (HERE / "corpus.yaml").read_bytes()
    digest = hashlib.sha256(text + ruamel.yaml.__version__.encode()).hexdigest()[:32]
    cached = CACHE / f"toolcall-corpus-{digest}.json"
    try:
        return json.loads(cached.read_text())
    except (OSError, ValueError):
        pass
    corpus = YAML(typ="safe").load(text.decode())
    encoded = json.dumps(corpus)
    if json.loads(encoded) == corpus:
        try:
            CACHE.mkdir(parents=True, exist_ok=True)
            partial = cached.with_name(f"{cached.name}.{os.getpid()}")
            partial.write_text(encoded)
            partial.replace(cached)              # atomic: a worker reading it sees the whole file or none
        except OSError:
            pass
    return corpus


def call_of(entry: dict) -> tuple[str, dict]:
    """(tool, args) of a corpus entry or of one of its `before` calls."""
    if "cmd" in entry:
        return "shell", {"command": entry["cmd"]}
    return entry["tool"], dict(entry.get("args") or {})


def label(entry: dict) -> str:
    tool, args = call_of(entry)
    return (args.get("command") if tool == "shell" else f"{tool} {args}")[:80]


@dataclass
class SessionSim:
    evaluator: Evaluator
    events: list[dict] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)

    def call(self, tool: str, args: dict, frozen: bool = False) -> dict:
        now = 100.0 + len(self.events)
        links, files = paths_from_rows(self.rows)
        enriched = enrich_toolcall(session={**SESSION, "frozen": frozen}, tool=tool, args=args, step=len(self.events),
                                   now=now, history=history_entries(self.events, now), links=links, files=files,
                                   tables=tables_of_policy(self.evaluator.source.data))
        decision = self.evaluator.decide("toolcall", enriched.doc)
        if decision["action"] != "deny":
            self.rows += path_rows(SESSION["id"], enriched.effects, now)
        self.events.append({"request_id": f"t{len(self.events)}", "step": len(self.events), "ts": now,
                            "action": decision["action"], "codes": decision["codes"],
                            "detail": {"tool": tool, "summary": str(args)[:300], **audit_facts(enriched.doc)}})
        return decision


def evaluator() -> Evaluator:
    return Evaluator(load_policy_dir(POLICY_DIR))


def run_entry(ev: Evaluator, entry: dict) -> tuple[dict, list[tuple[dict, dict]]]:
    """(the entry's decision, [(before call, its decision)]) in a fresh session."""
    sim = SessionSim(ev)
    before = [(b, sim.call(*call_of(b), frozen=bool(b.get("frozen")))) for b in entry.get("before", [])]
    return sim.call(*call_of(entry), frozen=bool(entry.get("frozen"))), before


def measure(ev: Evaluator, corpus: dict[str, list[dict]], run: Callable = run_entry) -> dict[str, Any]:
    """Recall on dangerous calls (not allowed) and pass rate on ordinary ones (allowed), with the misses. `run`
    decides an entry (run_entry, or one that keeps what it decided)."""
    dangerous = [(e, run(ev, e)[0]) for e in corpus["dangerous"]]
    ordinary = [(e, run(ev, e)[0]) for e in corpus["ordinary"]]
    caught = [e for e, d in dangerous if d["action"] != "allow"]
    passed = [e for e, d in ordinary if d["action"] == "allow"]
    return {"dangerous": len(dangerous), "caught": len(caught), "recall": len(caught) / len(dangerous),
            "ordinary": len(ordinary), "allowed": len(passed), "pass_rate": len(passed) / len(ordinary),
            "missed": [label(e) for e, d in dangerous if d["action"] == "allow"],
            "blocked": [label(e) for e, d in ordinary if d["action"] != "allow"],
            "results": dangerous + ordinary}
