"""The live placeholder registry: which session and secret every known placeholder belongs to.

A placeholder must be recognised wherever it goes, whichever session it belongs to: the egress proxy asks
this registry about every request (URL, headers, body, WebSocket frames). The session registry keeps it in
step with the sessions (a row added, a row deleted); nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker.inject import find_placeholders
from broker.scrub import Scrubber

Owner = tuple[str, str]                  # (session id, secret name)

MASK = b"SANDGATE_BLOCKED_" * 8          # what a placeholder in a streamed body becomes (cut to its length)
MASK_PREFIX = MASK[:12]


class PlaceholderRegistry:
    def __init__(self) -> None:
        self.owners: dict[str, Owner] = {}           # placeholder -> (session id, secret name)
        self._masker: Scrubber | None = None

    def __bool__(self) -> bool:
        return bool(self.owners)

    def add(self, session_id: str, placeholders: Mapping[str, str]) -> None:
        """Register a session's placeholders ({secret name: placeholder})."""
        for name, placeholder in placeholders.items():
            self.owners[placeholder] = (session_id, name.partition("#")[0])   # "aws#secret" belongs to "aws"
        self._masker = None

    def remove(self, placeholders: Mapping[str, str]) -> None:
        for placeholder in placeholders.values():
            self.owners.pop(placeholder, None)
        self._masker = None

    def find(self, data: str | bytes) -> set[Owner]:
        """The (session, secret) of every placeholder `data` carries, in any encoding."""
        return find_placeholders(data, self.owners) if self.owners else set()

    def secrets_in(self, value: str) -> list[str]:
        """The names of the secrets whose placeholders `value` carries (any session, any encoding)."""
        return sorted({name for _owner, name in self.find(value)})

    def masker(self) -> Scrubber:
        """A scrubber that blanks every known placeholder out (MASK, cut to the placeholder's length)."""
        if self._masker is None:
            self._masker = Scrubber({ph.encode(): MASK[:len(ph)] for ph in self.owners})
        return self._masker
