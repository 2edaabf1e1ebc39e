"""Synthetic addresses for names (transparent capture). Pure: no sockets, no clock.

The filtering resolver answers a name the session may reach with an address of its own, one per name and per
session, from `SYNTHETIC_POOL`. Inside the sandbox every address routes to the gateway, so a connection to a
synthetic address reaches the transparent listener, which reads the name back from the address the sandbox
dialled: the connection's destination is that name (as a CONNECT target would be), whatever the client sends
or does not send (SNI, Host). An address the resolver did not give out stands for itself (an IP literal).
"""
from __future__ import annotations

import ipaddress

SYNTHETIC_POOL = ipaddress.IPv4Network("10.200.128.0/17")
MAX_NAMES_PER_SESSION = 4096


class SyntheticNames:
    """Per session: name -> address and address -> name, allocated in order, never reused within a session."""

    def __init__(self, pool: ipaddress.IPv4Network = SYNTHETIC_POOL, limit: int = MAX_NAMES_PER_SESSION):
        self._pool = pool
        self._limit = max(0, min(limit, pool.num_addresses - 2))
        self._by_name: dict[str, dict[str, str]] = {}
        self._by_addr: dict[str, dict[str, str]] = {}

    def address_for(self, sid: str, name: str) -> str | None:
        """The session's address for `name` (allocated on first use); None when the session's table is full."""
        names = self._by_name.setdefault(sid, {})
        addr = names.get(name)
        if addr is not None:
            return addr
        if len(names) >= self._limit:
            return None
        addr = str(self._pool.network_address + 1 + len(names))
        names[name] = addr
        self._by_addr.setdefault(sid, {})[addr] = name
        return addr

    def name_for(self, sid: str, addr: str) -> str | None:
        """The name the session was given `addr` for, or None (then the address stands for itself)."""
        return self._by_addr.get(sid, {}).get(addr)

    def forget(self, sid: str) -> None:
        self._by_name.pop(sid, None)
        self._by_addr.pop(sid, None)

    def retain(self, live: set[str]) -> None:
        """Forget every session not in `live` (ended sessions' tables)."""
        for sid in [s for s in self._by_name if s not in live]:
            self.forget(sid)

    def sessions(self) -> int:
        return len(self._by_name)
