"""RFC 3339 UTC times for the API."""
from __future__ import annotations

from datetime import datetime, timezone


def rfc3339(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
