"""What a piece of interpreter code does, as plain facts (shared by the Python and the script-language analysers)."""
from __future__ import annotations

from dataclasses import dataclass, field

MAX_CODE = 100_000          # longer code is not analysed (unparsed)


@dataclass
class CodeFacts:
    """Deletes, writes, moves and links with their literal paths (None: computed at run time), the programs it
    starts as shell text (None: computed), HTTP writes, and whether it computes code at run time (opaque)."""
    language: str
    parsed: bool = True
    opaque: bool = False
    deletes: list[str | None] = field(default_factory=list)
    writes: list[str | None] = field(default_factory=list)
    moves: list[str | None] = field(default_factory=list)
    links: list[tuple[str | None, str | None]] = field(default_factory=list)   # (target, link)
    spawns: list[str | None] = field(default_factory=list)
    http: list[tuple[str, str | None]] = field(default_factory=list)           # (METHOD, url or None)

    def summary(self) -> dict:
        """The `code` fact of a command."""
        return {"language": self.language, "parsed": self.parsed, "opaque": self.opaque}


def unparsed(language: str) -> CodeFacts:
    return CodeFacts(language, parsed=False)
