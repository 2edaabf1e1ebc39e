"""`sandgate policy eval --tool NAME --args JSON` and `sandgate policy eval --request 'METHOD URL'`: decide a raw
tool call or request the way the server would, building its input with the server's own builders (the tool-call
gate's `toolcall_base` + `toolcall_facts`, the proxy's `build_egress_input` and address vetting), then print the
decision (`--show-input`: and the input).

What the CLI cannot know is left out, and said so on stderr: a session's history and the files and links its
earlier calls left (the server adds them), the request headers a client sends (only `--header` ones), and the
package firewall's advisories. For HTTPS the proxy decides the CONNECT first and then each request in the
tunnel: both are decided here, and the answer is the CONNECT's when it is not an allow.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from gateway.config import Config
from gateway.net.addresses import parse_ip_literal, vet_addresses
from gateway.net.hosts import normalise_host
from gateway.policy.inputs import build_egress_input
from gateway.toolcalls.enrich import toolcall_base, toolcall_facts
from gateway.toolcalls.tables import Tables, tables_of_policy

DEFAULT_PORTS = {"http": 80, "https": 443}



# -- pure builders --------------------------------------------------------------------------------------------

def session_from_view(view: dict, now: float) -> dict:
    """A session row from the API's session view (created_at in RFC 3339 or Unix seconds)."""
    if not isinstance(view, dict) or not isinstance(view.get("id"), str):
        raise ValueError("--session-file: not a session (a JSON object with an id, as GET /v1/sessions/ID gives)")
    created = view.get("created_at", now)
    if isinstance(created, str):
        created = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
    return {"id": view["id"], "workload": view.get("workload", "ephemeral"), "labels": view.get("labels") or {},
            "frozen": bool(view.get("frozen")), "created_at": float(created), "allow": view.get("allow") or [],
            "workspace": view.get("workspace") or "/workspace", "secrets": view.get("secrets") or []}


def session_from_flags(args: argparse.Namespace, now: float) -> dict:
    labels = {}
    for item in args.label:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--label: expected KEY=VALUE, got {item!r}")
        labels[key] = value
    return {"id": "s_policy_eval", "workload": args.workload, "labels": labels, "frozen": args.frozen,
            "created_at": now, "allow": list(args.allow), "workspace": args.workspace, "secrets": list(args.secret)}


def toolcall_input(session: dict, tool: str, args: dict, now: float, tables: Tables | None = None) -> dict:
    """The `sandgate.toolcall` input the gate builds for this call in a session with no earlier calls."""
    base = toolcall_base(session=session, tool=tool, args=args, step=None, now=now, history=[])
    facts, _effects = toolcall_facts(base, {}, {}, tables)
    return {**base, **facts}


def parse_request_line(line: str) -> tuple[str, str]:
    """'METHOD URL' or 'URL' -> (METHOD, URL). ValueError for anything else."""
    words = line.split()
    if len(words) == 1:
        return "GET", words[0]
    if len(words) == 2 and words[0].isalpha():
        return words[0].upper(), words[1]
    raise ValueError(f"--request: expected 'METHOD URL', got {line!r}")


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise ValueError(f"--header: expected 'NAME: VALUE', got {text!r}")
    return name.strip(), value.strip()


def egress_inputs(session: dict, line: str, headers: list[str], now: float, cfg: Config) -> list[tuple[str, dict]]:
    """[(label, input)] in the order the proxy decides them: for an HTTPS URL the CONNECT, then the request in
    the tunnel; for http:// the request; for `CONNECT host:port` the CONNECT alone."""
    method, target = parse_request_line(line)
    pairs = [_header(h) for h in headers]
    if method == "CONNECT":
        host, sep, port_text = target.rpartition(":")
        if not sep or not port_text.isdigit():
            raise ValueError(f"--request: CONNECT needs host:port, got {target!r}")
        return [(f"CONNECT {target}", _egress(session, now, "CONNECT", "", host.strip("[]"), int(port_text), "",
                                              "", pairs, cfg))]
    parts = urlsplit(target)
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"--request: expected an http:// or https:// URL, got {target!r}")
    port = parts.port or DEFAULT_PORTS[parts.scheme]
    out = []
    if parts.scheme == "https":
        out.append((f"CONNECT {parts.hostname}:{port}", _egress(session, now, "CONNECT", "", parts.hostname, port,
                                                               "", "", pairs, cfg)))
    out.append((f"{method} {target}", _egress(session, now, method, parts.scheme, parts.hostname, port,
                                              parts.path or "/", parts.query, pairs, cfg,
                                              tunnel=parts.scheme == "https")))
    return out


def _egress(session: dict, now: float, method: str, scheme: str, host: str, port: int, path: str, query: str,
            headers: list[tuple[str, str]], cfg: Config, tunnel: bool = False) -> dict:
    host = normalise_host(host)
    literal = parse_ip_literal(host)
    ip, ip_class = "", ""
    if literal is not None:                         # as the proxy does: only a literal address is classed up front
        ip = str(literal)
        ip_class = vet_addresses([ip], port, private_allow=cfg.egress.private_allow).ip_class
    return build_egress_input(session=session, now=now, method=method, scheme=scheme, host=host, port=port,
                              path=path, query=query, headers=headers, ip=ip, ip_class=ip_class, tunnel=tunnel)


# -- the command ----------------------------------------------------------------------------------------------

def run(cfg: Config, args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr        # the streams at call time (a caller may redirect them)
    from gateway.policy.evaluator import Evaluator
    from gateway.policy.factory import policy_dir
    from gateway.policy.loader import load_policy_dir
    from gateway.policy.rego import PolicyError

    try:
        if args.tool and args.request:
            raise ValueError("give --tool or --request, not both")
        if getattr(args, "input", None):
            raise ValueError("give --input (an input document) or --tool/--request (a raw call), not both")
        now = time.time()
        if args.session_file:
            text = sys.stdin.read() if args.session_file == "-" else Path(args.session_file).read_text("utf-8")
            session = session_from_view(json.loads(text), now)
        else:
            session = session_from_flags(args, now)
        if args.tool:
            if args.kind not in (None, "toolcall"):
                raise ValueError("--tool is a tool call: --kind toolcall (or leave --kind out)")
            try:
                call_args = json.loads(args.args)
            except ValueError as exc:
                raise ValueError(f"--args: not JSON ({exc})") from None
            if not isinstance(call_args, dict):
                raise ValueError("--args: a JSON object, such as '{\"command\": \"ls\"}'")
        directory = Path(args.policies) if args.policies else policy_dir(cfg.policy)
        source = load_policy_dir(directory)
        if args.tool:
            tables = tables_of_policy(source.data)          # the facts read that policy's tables, as the gate does
            kind, steps = "toolcall", [(f"{args.tool} {args.args}", toolcall_input(session, args.tool, call_args,
                                                                                     now, tables))]
        else:
            if args.kind not in (None, "egress"):
                raise ValueError("--request is an egress request: --kind egress (or leave --kind out)")
            kind, steps = "egress", egress_inputs(session, args.request, args.header, now, cfg)
        evaluator = Evaluator(source)
    except (ValueError, OSError, PolicyError) as exc:
        print(f"sandgate policy: {exc}", file=err)
        return 1
    results = []
    for label, doc in steps:
        decision = evaluator.decide(kind, doc)
        entry: dict[str, Any] = {"request": label, "decision": decision}
        if args.show_input:
            entry["input"] = doc
        if args.explain:
            entry["explain"] = evaluator.explain(kind, doc)
        results.append(entry)
        if decision["action"] != "allow":
            break                           # the proxy stops at a CONNECT it does not allow
    final = results[-1]
    if len(steps) > 1:
        for entry in results:
            print(f"sandgate: {entry['request']} -> {entry['decision']['action']}", file=err)
        if len(results) < len(steps):
            print(f"sandgate: decided at the CONNECT: the request in the tunnel is not reached", file=err)
    if kind == "toolcall":
        print("sandgate: decided as the first call of a session (no history, no files written by earlier calls)",
              file=err)
    if not (args.show_input or args.explain):
        out.write(json.dumps(final["decision"], indent=2) + "\n")
        return 0
    doc_out: dict[str, Any] = {"decision": final["decision"]}
    if len(steps) > 1:
        doc_out["steps"] = results
    else:
        doc_out.update({k: v for k, v in final.items() if k in ("input", "explain")})
    out.write(json.dumps(doc_out, indent=2) + "\n")
    return 0
