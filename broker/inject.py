"""Finding placeholders in a request and swapping them for real values.

Pure functions of plain values: no I/O, no clock, no mitmproxy. The proxy decides
per request: `find_placeholders` on everything the sandbox sent, `check_destination`
(non-empty means exfiltration: block), then the `substitute_*` functions for the
locations each secret allows.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar
from urllib.parse import quote

T = TypeVar("T")
HEADER, QUERY, BODY = "header", "query", "body"
LOCATIONS = frozenset({HEADER, QUERY, BODY})
_BASIC_HEADERS = frozenset({"authorization", "proxy-authorization"})
_UNSAFE_IN_HEADER = re.compile(r"[\x00-\x1f\x7f]")
_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|\\([\"\\/bfnrt])|&#[xX]([0-9a-fA-F]{1,6});|&#([0-9]{1,7});")
_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")
_SHORT_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_MAX_DEPTH = 4
_BUDGET_FACTOR = 8


@dataclass(frozen=True)
class Binding:
    """One secret as used by one session: its placeholder, real value and where it may go."""

    name: str
    placeholder: str
    value: str = field(repr=False)
    hosts: frozenset[str]
    inject_in: frozenset[str]

    def __post_init__(self) -> None:
        if not self.placeholder or not self.placeholder.isascii() or not self.placeholder.isprintable():
            raise ValueError(f"secret {self.name!r}: placeholder must be printable ASCII")
        if not self.value:
            raise ValueError(f"secret {self.name!r}: empty value")
        if not self.inject_in <= LOCATIONS:
            raise ValueError(f"secret {self.name!r}: inject_in must be a subset of {sorted(LOCATIONS)}")


# ---------------------------------------------------------------- detection

def find_placeholders(data: str | bytes, placeholders: Mapping[str, T]) -> set[T]:
    """The owners of every placeholder in `data`: raw, percent-encoded (any hex case,
    partly or repeatedly), JSON/HTML-escaped, or inside base64 (standard or URL-safe,
    any alignment, e.g. `Basic <b64>`), and combinations of those up to four layers
    deep. Work is bounded (about 8x the input decoded): roughly 0.1 s per MiB at worst.
    """
    if not placeholders:
        return set()
    text = data.decode("latin-1") if isinstance(data, (bytes, bytearray, memoryview)) else data
    shortest = min(len(p) for p in placeholders)
    token = re.compile(r"[A-Za-z0-9+/_-]{%d,}" % max(4, -(-shortest * 4 // 3)))
    remaining = dict(placeholders)
    found: set[T] = set()
    budget = _BUDGET_FACTOR * len(text) + 65536
    queue, seen = deque([(text, 0)]), {text}
    while queue and remaining:
        view, depth = queue.popleft()
        for ph in [p for p in remaining if p in view]:
            found.add(remaining.pop(ph))
        if depth >= _MAX_DEPTH:
            continue
        for decoded in _decodings(view, token):
            if budget <= 0:
                break
            if decoded not in seen:
                seen.add(decoded)
                budget -= len(decoded)
                queue.append((decoded, depth + 1))
    return found


def _decodings(text: str, token: re.Pattern[str]) -> Iterable[str]:
    """One layer of decoding: percent, escapes, then base64 tokens (aligned first)."""
    if "%" in text:
        yield _PERCENT.sub(lambda m: chr(int(m.group(1), 16)), text)
    if "\\" in text or "&#" in text:
        yield _ESCAPE.sub(_unescape, text)
    tokens = [m.group() for m in token.finditer(text)]
    for offset in range(4):
        for tok in tokens:
            decoded = _b64decode(tok[offset:])
            if decoded:
                yield decoded.decode("latin-1")


def _unescape(m: re.Match[str]) -> str:
    code = m.group(1) or m.group(3)
    if code:
        return chr(int(code, 16))
    if m.group(4):
        number = int(m.group(4))
        return chr(number) if number <= 0x10FFFF else m.group()
    return _SHORT_ESCAPES.get(m.group(2), m.group(2))


def _b64decode(text: str) -> bytes:
    text = text.rstrip("=").replace("-", "+").replace("_", "/")
    text = text[: len(text) - 1] if len(text) % 4 == 1 else text
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        return b""


# ---------------------------------------------------------------- destination

def host_matches(host: str, allowed: Iterable[str]) -> bool:
    """Exact match, or "*.example.com" for subdomains of example.com (not the apex).

    Both sides are canonical host names: the gateway normalises the destination and every configured host
    with its one `normalise_host` (gateway/net/hosts.py) before they reach the broker. A spelling that is
    not canonical matches nothing.
    """
    for entry in allowed:
        if entry == host or (entry.startswith("*.") and host.endswith(entry[1:]) and host != entry[2:]):
            return True
    return False


class Bound(Protocol):
    name: str
    hosts: Collection[str]


B = TypeVar("B", bound=Bound)


def check_destination(host: str, bindings_found: Iterable[B]) -> list[B]:
    """The bindings found in a request that are NOT bound to `host` (canonical); non-empty means block.

    Takes anything with `name` and `hosts` (a `Binding`, or a `SecretSpec`, so a request
    can be refused before any real value is read).
    """
    bad = {id(b): b for b in bindings_found if not host_matches(host, b.hosts)}
    return sorted(bad.values(), key=lambda b: b.name)


class Transported(Protocol):
    name: str
    allow_plaintext: bool
    ports: Collection[int]


T2 = TypeVar("T2", bound=Transported)


def check_transport(tls: bool, port: int, found: Iterable[T2]) -> tuple[list[T2], list[T2]]:
    """(secrets that would travel in cleartext, secrets not allowed to this port); either non-empty blocks.

    A secret is injected only into TLS-protected requests (https, wss) unless it allows plaintext, and only
    to its `ports` when it lists any.
    """
    unique = {id(s): s for s in found}.values()
    cleartext = sorted((s for s in unique if not tls and not s.allow_plaintext), key=lambda s: s.name)
    wrong_port = sorted((s for s in unique if s.ports and port not in s.ports), key=lambda s: s.name)
    return cleartext, wrong_port


# ---------------------------------------------------------------- substitution

@functools.lru_cache(maxsize=512)          # placeholders share an alphabet: a function of the character
def _char_pattern(char: str) -> str:
    hexed = "".join(f"[{c}{c.lower()}]" if c.isalpha() else c for c in f"{ord(char):02X}")
    return f"(?:{re.escape(char)}|%{hexed})"


def _pattern(bindings: Sequence[Binding]) -> str:
    return "|".join("(" + "".join(_char_pattern(c) for c in b.placeholder) + ")" for b in bindings)


def _applicable(bindings: Sequence[Binding], location: str) -> list[Binding]:
    chosen = [b for b in bindings if location in b.inject_in]
    return sorted(chosen, key=lambda b: len(b.placeholder), reverse=True)


def _sub(text: str, bindings: list[Binding], raw: Callable[[Binding], str],
         encoded: Callable[[Binding], str]) -> tuple[str, list[Binding]]:
    if not bindings:
        return text, []
    used: list[Binding] = []

    def replace(m: re.Match[str]) -> str:
        binding = bindings[m.lastindex - 1]
        if binding not in used:
            used.append(binding)
        return raw(binding) if m.group() == binding.placeholder else encoded(binding)

    return re.sub(_pattern(bindings), replace, text), used


def _quoted(b: Binding) -> str:
    return quote(b.value, safe="")


def _header_value(b: Binding) -> str:
    if _UNSAFE_IN_HEADER.search(b.value):
        raise ValueError(f"secret {b.name!r}: value contains control characters; refusing to put it in a header")
    return b.value


def _substitute_basic(value: str, bindings: list[Binding]) -> tuple[str, list[Binding]]:
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "basic" or not token.strip():
        return value, []
    try:
        creds = base64.b64decode(token.strip(), validate=True).decode("utf-8", "surrogateescape")
    except (binascii.Error, ValueError):
        return value, []
    by_placeholder = {b.placeholder: b for b in reversed(bindings)}  # longest first wins below
    used = [b for b in bindings if b.placeholder in creds]
    if not used:
        return value, []
    pattern = "|".join(re.escape(b.placeholder) for b in bindings)  # one pass: no value is rescanned
    creds = re.sub(pattern, lambda m: _header_value(by_placeholder[m.group()]), creds)
    return f"{scheme} {base64.b64encode(creds.encode('utf-8', 'surrogateescape')).decode('ascii')}", used


def substitute_headers(headers: Sequence[tuple[str, str]], bindings: Sequence[Binding],
                       ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Replace placeholders in header values (raw, percent-encoded, inside Basic credentials).

    Returns (new headers, uses) with uses = [(secret name, "header:<lower-case name>")].
    ValueError if a value with control characters would land in a header.
    """
    chosen = _applicable(bindings, HEADER)
    out: list[tuple[str, str]] = []
    uses: list[tuple[str, str]] = []
    for name, value in headers:
        used: list[Binding] = []
        if name.lower() in _BASIC_HEADERS:
            value, used = _substitute_basic(value, chosen)
        value, more = _sub(value, chosen, _header_value, _quoted)
        out.append((name, value))
        for b in used + more:
            if (b.name, f"header:{name.lower()}") not in uses:
                uses.append((b.name, f"header:{name.lower()}"))
    return out, uses


def substitute_query(query: str, bindings: Sequence[Binding]) -> tuple[str, list[tuple[str, str]]]:
    """Replace placeholders in a raw query string; the value goes in percent-encoded."""
    text, used = _sub(query, _applicable(bindings, QUERY), _quoted, _quoted)
    return text, [(b.name, QUERY) for b in used]


def substitute_body(body: bytes, bindings: Sequence[Binding], content_type: str | None = None,
                    ) -> tuple[bytes, list[tuple[str, str]]]:
    """Replace placeholders in a request body.

    A percent-encoded placeholder, or any placeholder in a form body, becomes the
    percent-encoded value; in a JSON body a raw one becomes the JSON-escaped value;
    otherwise the raw value (UTF-8).
    """
    chosen = _applicable(bindings, BODY)
    if not chosen or not body:
        return body, []
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    raw: Callable[[Binding], str] = lambda b: b.value  # noqa: E731
    if kind == "application/x-www-form-urlencoded":
        raw = _quoted
    elif kind == "application/json" or kind.endswith("+json"):
        raw = lambda b: json.dumps(b.value, ensure_ascii=False)[1:-1]  # noqa: E731
    text, used = _sub(bytes(body).decode("utf-8", "surrogateescape"), chosen, raw, _quoted)
    return text.encode("utf-8", "surrogateescape"), [(b.name, BODY) for b in used]


# ---------------------------------------------------------------- the verdict on a request's placeholders

class Spec(Bound, Transported, Protocol):
    pass


@dataclass(frozen=True)
class Refusal:
    """Why a request carrying placeholders may not leave: a stable code, a reason, the secrets it names."""

    code: str
    reason: str
    names: tuple[str, ...] = ()
    foreign: bool = False


def refuse_placeholders(found: Iterable[tuple[str, str]], session_id: str, host: str, tls: bool, port: int,
                        specs: Mapping[str, Spec]) -> Refusal | None:
    """None when every placeholder found — (owner session, secret name) pairs — may go to `host` (canonical)
    over this transport; else the first reason it may not: a placeholder of another session, a secret not bound
    to the host, a secret headed for cleartext, or a secret not allowed to this port."""
    found = list(found)
    foreign = sorted(name for owner, name in found if owner != session_id)
    mine = [specs[name] for owner, name in found if owner == session_id and name in specs]
    unbound = sorted(s.name for s in check_destination(host, mine))
    cleartext, wrong_port = check_transport(tls, port, mine)
    if foreign:
        return Refusal("secret.exfiltration", "a placeholder of another session was sent", (), True)
    if unbound:
        return Refusal("secret.exfiltration", f"secret {', '.join(unbound)} is not bound to {host}", tuple(unbound))
    if cleartext:
        names = tuple(s.name for s in cleartext)
        return Refusal("secret.plaintext", f"secret {', '.join(names)} is sent only over TLS (https, wss)", names)
    if wrong_port:
        names = tuple(s.name for s in wrong_port)
        return Refusal("secret.port", f"secret {', '.join(names)} is not allowed to port {port}", names)
    return None
