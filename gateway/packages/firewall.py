"""The package firewall service: one in-memory index per replica, kept current from the store.

The index starts with the records shipped in the package (sources.BUILTIN) and takes in every load and exception
written to the store: `poll` asks the store for its package revision about once a second and reads only what is
newer, building the next index on a worker thread (copy-on-write: lookups on the loop never wait). The proxy asks
`download` for a request's package facts (`input.request.package`) and `rewrite` for an index document.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Mapping, Sequence

from gateway.packages.index import Advisory, PackageIndex
from gateway.packages.osv import Entry, entries_from
from gateway.packages.rewrite import rewrite_document
from gateway.packages.sources import builtin_records
from gateway.packages.urls import candidate_names, download_of
from gateway.packages.versions import normalise_name
from gateway.store.packages import PackageStore

log = logging.getLogger("sandgate.packages")
POLL_S = 1.0


def builtin_index() -> PackageIndex:
    entries, _bad = entries_from(builtin_records())
    return PackageIndex().updated(entries)


class PackageFirewall:
    def __init__(self, store: PackageStore | None, registries: Mapping[str, tuple[str, ...]], max_bytes: int):
        self._store = store
        self.registries = dict(registries)
        self.max_bytes = max_bytes
        self.index = builtin_index()
        self.rev = 0

    # -- keeping current -------------------------------------------------------------------------------------
    async def refresh(self) -> bool:
        """Take in what the store has past this replica's revision; whether anything changed."""
        if self._store is None:
            return False
        rev, rows, exceptions = await self._store.changes(self.rev)
        if rev == self.rev:
            return False
        base = self.index
        if rev < self.rev:                          # the store was replaced: start again from the shipped records
            base = builtin_index()
            rev, rows, exceptions = await self._store.changes(0)
        self.index = await asyncio.to_thread(base.updated, [Entry(*row) for row in rows], exceptions)
        self.rev = rev
        log.info("package firewall: revision %d (%d advisory entries)", rev, len(self.index))
        return True

    async def poll(self, every_s: float = POLL_S) -> None:
        failing = False
        while True:
            await asyncio.sleep(every_s)
            try:
                await self.refresh()
                failing = False
            except Exception as exc:  # noqa: BLE001 - keep the index we have; say so once
                if not failing:
                    log.warning("package firewall: cannot read the store (%s); keeping revision %d",
                                exc.__class__.__name__, self.rev)
                failing = True

    # -- lookups ---------------------------------------------------------------------------------------------
    def ecosystems(self, host: str) -> tuple[str, ...]:
        return self.registries.get(host, ())

    def advisories(self, ecosystem: str, name: str, version: str | None) -> tuple[Advisory, ...]:
        try:
            norm = normalise_name(ecosystem, name)
        except ValueError:
            return ()
        return self.index.advisories(ecosystem, norm, version)

    def download(self, host: str, method: str, path: str) -> dict[str, Any] | None:
        """`input.request.package` for a GET or HEAD of a package file on a registry host, else None."""
        if method not in ("GET", "HEAD"):
            return None
        for eco in self.ecosystems(host):
            found = download_of(eco, path)
            if found is None:
                continue
            first: dict[str, Any] | None = None
            for name, version in found.readings:
                advisories = self.index.advisories(eco, name, version)
                facts = {"ecosystem": eco, "name": name, "version": version or "",
                         "advisories": [a.id for a in advisories]}
                if advisories:
                    return facts
                first = first or facts
            if first is not None:
                return first
        return None

    def index_ecosystem(self, host: str, method: str, path: str) -> str | None:
        """The ecosystem to read a response as, when it may be an index document naming a listed package (cheap:
        the path's names looked up); None for anything to pass untouched."""
        if method != "GET":
            return None
        for eco in self.ecosystems(host):
            if download_of(eco, path) is not None:
                continue
            if any(self.index.listed(eco, name) for name in candidate_names(eco, path)):
                return eco
        return None

    def rewrite(self, ecosystem: str, content_type: str, body: bytes) -> bytes | None:
        """The index document with listed versions marked (yanked / deprecated), or None to pass it as it is.
        Pure and thread-safe: it reads the index it started with."""
        index = self.index

        def lookup(name: str, version: str | None) -> Sequence[Advisory]:
            try:
                return index.advisories(ecosystem, normalise_name(ecosystem, name), version)
            except ValueError:
                return ()
        return rewrite_document(ecosystem, content_type, body, lookup)
