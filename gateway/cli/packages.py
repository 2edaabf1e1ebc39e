"""`sandgate packages load|check|allow`: the package firewall's records and site exceptions, in the store named by
the configuration (every running replica takes them in within about a second; no restart)."""
from __future__ import annotations

import argparse
import asyncio
import getpass
import socket
import sys
import time
from typing import Any, Callable

from gateway.config import Config


def register(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    packages = sub.add_parser("packages", help="the package firewall: load OSV records, check, allow a version")
    packages.set_defaults(func=cmd_packages)
    psub = packages.add_subparsers(dest="packages_cmd", required=True)
    load = psub.add_parser("load", help="store OSV malicious-package records (JSON files, directories, zips)")
    common(load)
    load.add_argument("paths", nargs="+", metavar="PATH")
    check = psub.add_parser("check", help="print the advisories that list a package version (exit 1 if any)")
    common(check)
    allow = psub.add_parser("allow", help="a site exception: allow one listed version (audited)")
    common(allow)
    allow.add_argument("--reason", default="", help="why (kept with the exception and in the audit trail)")
    allow.add_argument("--remove", action="store_true", help="withdraw the exception instead")
    for p in (check, allow):
        p.add_argument("ecosystem", metavar="ECOSYSTEM", help="PyPI or npm")
        p.add_argument("name", metavar="NAME")
        p.add_argument("version", metavar="VERSION")


def _who() -> str:
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name (a container without passwd entry)
        user = "unknown"
    return f"cli:{user}@{socket.gethostname()}"


async def _with_store(cfg: Config, work: Callable[[Any], Any]) -> Any:
    from gateway.store import Store

    if cfg.store_url.startswith("sqlite"):
        cfg.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    store = Store(cfg.store_url)
    try:
        await store.open()
        return await work(store)
    finally:
        store.close()


def cmd_packages(cfg: Config, args: argparse.Namespace) -> int:
    try:
        if args.packages_cmd == "load":
            return asyncio.run(_with_store(cfg, lambda store: _load(store, args.paths)))
        from gateway.packages.versions import canonical_version, normalise_name, parse_ecosystem

        eco = parse_ecosystem(args.ecosystem)
        name = normalise_name(eco, args.name)
        version = canonical_version(eco, args.version)
        if args.packages_cmd == "check":
            return asyncio.run(_with_store(cfg, lambda store: _check(store, eco, name, version)))
        return asyncio.run(_with_store(cfg, lambda store: _allow(store, eco, name, version, args.reason,
                                                                 args.remove)))
    except (ValueError, OSError) as exc:
        print(f"sandgate: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the store: one line, no traceback (the URL may hold a password)
        print(f"sandgate: packages {args.packages_cmd} failed: {exc.__class__.__name__}: "
              f"{str(exc).splitlines()[0][:200] if str(exc) else ''}", file=sys.stderr)
        return 1


async def _load(store: Any, paths: list[str]) -> int:
    from gateway.packages.osv import entries_of
    from gateway.packages.sources import ReadReport, read_records
    from gateway.store.packages import PackageStore

    started = time.monotonic()
    report = ReadReport()

    def read() -> tuple[list, int, int]:
        """Records are read one by one and only their entries kept (the public set is 200k records)."""
        entries: dict = {}
        records = bad = 0
        for record in read_records(paths, report):
            records += 1
            try:
                for entry in entries_of(record):
                    entries[entry.key] = entry
            except ValueError:
                bad += 1
        return list(entries.values()), bad, records
    entries, bad, records = await asyncio.to_thread(read)
    rev, rows = await store.run(PackageStore(store).put_entries_sync, [e.row() for e in entries])
    await store.append_events([_event("package.load", "load", {
        "paths": paths[:20], "records": records, "entries": rows, "revision": rev, "by": _who()})])
    for line in report.skipped[:20]:
        print(f"sandgate: skipped {line}", file=sys.stderr)
    withdrawn = sum(1 for e in entries if e.withdrawn)
    print(f"sandgate: {rows} package entries from {records} records in {report.files} files stored as revision "
          f"{rev} ({withdrawn} withdrawn, {bad} not OSV records, {len(report.skipped)} files skipped) "
          f"in {time.monotonic() - started:.1f} s")
    return 0


def _event(kind: str, action: str, detail: dict) -> dict:
    return {"session": None, "step": None, "kind": kind, "action": action, "reasons": [], "codes": [],
            "request_id": None, "method": None, "host": None, "path": None, "http_status": None, "bytes_in": None,
            "bytes_out": None, "policy_rev": None, "detail": detail, "ts": time.time()}


async def _index(store: Any) -> Any:
    from gateway.packages.firewall import PackageFirewall
    from gateway.store.packages import PackageStore

    firewall = PackageFirewall(PackageStore(store), {}, 1)
    await firewall.refresh()
    return firewall


async def _check(store: Any, eco: str, name: str, version: str) -> int:
    firewall = await _index(store)
    found = firewall.advisories(eco, name, version)
    if not found:
        # Listed but for a site exception? (The same index without it would name advisories.)
        excepted = firewall.index.updated(exceptions=[(eco, name, version, True)]).advisories(eco, name, version)
        print(f"{eco} {name} {version}: no advisory lists it" + (" (a site exception allows it)" if excepted
                                                                   else ""))
        return 0
    print(f"{eco} {name} {version}: listed as malicious by {len(found)} "
          f"advisor{'y' if len(found) == 1 else 'ies'}")
    for advisory in found:
        print(f"  {advisory.id}  {advisory.summary}")
    return 1


async def _allow(store: Any, eco: str, name: str, version: str, reason: str, remove: bool) -> int:
    from gateway.store.packages import PackageStore

    by = _who()
    rev = await store.run(PackageStore(store).put_exception_sync, eco, name, version, reason, by, time.time(),
                          remove)
    await store.append_events([_event("package.allow", "revoke" if remove else "allow", {
        "ecosystem": eco, "name": name, "version": version, "reason": reason, "by": by, "revision": rev})])
    print(f"sandgate: {eco} {name} {version} {'no longer allowed' if remove else 'allowed'} as a site exception "
          f"(revision {rev})")
    return 0
