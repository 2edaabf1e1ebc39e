"""Scrubbing real credential values out of responses before they reach the sandbox.

Pure. A `Scrubber` compiles one regular expression matching each real value in the
forms a server is likely to echo it in, and replaces it with the placeholder:

- raw, percent-encoded (any hex case, any mix of encoded and plain characters,
  '+' for space), JSON-escaped (\\uXXXX in any case, \\" \\\\ \\/ and friends) and HTML-escaped
  (&amp; &lt; &gt; &quot; &apos;, numeric references in decimal or hex for any character);
- base64, standard and URL-safe, at each of the three byte alignments, so the
  value is found inside a larger blob (an echoed `Authorization: Basic ...`).
  The edge characters that mix value bits with neighbouring bits are rewritten
  too, so no bit of the value survives.

Every match has a bounded length (`Scrubber.max_match`), which is what lets
`StreamScrubber` scrub chunk by chunk with exactly the whole-buffer result.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping

STD = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
URLSAFE = STD[:62] + b"-_"
MIN_BASE64_VALUE = 8  # shorter values would match random base64 too often
_JSON_SHORT = {'"': '"', "\\": "\\", "/": "/", "\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t"}
_HTML_NAMED = {"&": (b"&amp;",), "<": (b"&lt;",), ">": (b"&gt;",), '"': (b"&quot;",), "'": (b"&apos;",)}
_REF_ZEROS = 4  # leading zeros allowed in a numeric character reference (bounds the match length)


def _hex_ci(number: int, width: int) -> bytes:
    digits = f"{number:0{width}X}"
    return "".join(f"[{d}{d.lower()}]" if d.isalpha() else d for d in digits).encode()


@functools.lru_cache(maxsize=4096)
def _char_alternatives(char: str, encoded: bytes) -> tuple[bytes, int]:
    """Regex alternatives for one character of the value, and the longest match (kept per character: a function
    of its arguments only, and values share their characters)."""
    plain = b"".join(b"(?:" + re.escape(bytes([b])) + b"|%" + _hex_ci(b, 2) + b")" for b in encoded)
    alts, longest = [plain], 3 * len(encoded)
    code = ord(char)
    if len(encoded) > 1 or code < 0x80:
        if code > 0xFFFF:
            high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
            alts.append(rb"\\u" + _hex_ci(high, 4) + rb"\\u" + _hex_ci(low, 4))
            longest = max(longest, 12)
        else:
            alts.append(rb"\\u" + _hex_ci(code, 4))
            longest = max(longest, 6)
    if char in _JSON_SHORT:
        alts.append(rb"\\" + re.escape(_JSON_SHORT[char].encode()))
    if char == " ":
        alts.append(rb"\+")
    if char != "\ufffd":
        # HTML: a numeric character reference (decimal or hex, any case, a few leading zeros), a named one.
        zeros = b"0{0,%d}" % _REF_ZEROS
        alts.append(b"&#" + zeros + str(code).encode() + b";")
        alts.append(b"&#[xX]" + zeros + _hex_ci(code, 1) + b";")
        longest = max(longest, 4 + _REF_ZEROS + len(f"{code:x}"), 3 + _REF_ZEROS + len(str(code)))
        for named in _HTML_NAMED.get(char, ()):
            alts.append(re.escape(named))
            longest = max(longest, len(named))
    return b"(?:" + b"|".join(alts) + b")", longest


def _case_variants(text: str) -> set[bytes]:
    out = {""}
    for c in text:
        out = {o + v for o in out for v in {c.upper(), c.lower()}}
    return {o.encode() for o in out}


def _escape_triggers(real: bytes) -> set[bytes]:
    """The escapes (of this value's characters) that a non-raw text form contains."""
    out: set[bytes] = set()
    for b in set(real):
        out |= _byte_triggers(b)
    try:
        text = real.decode("utf-8")
    except UnicodeDecodeError:
        text = real.decode("latin-1")
    for char in set(text):
        out |= _char_triggers(char)
    return out


@functools.lru_cache(maxsize=256)
def _byte_triggers(b: int) -> frozenset[bytes]:
    return frozenset(b"%" + v for v in _case_variants(f"{b:02X}"))


@functools.lru_cache(maxsize=4096)
def _char_triggers(char: str) -> frozenset[bytes]:
    code = ord(char) if ord(char) <= 0xFFFF else 0xD800 + ((ord(char) - 0x10000) >> 10)
    out = {b"\\u" + v for v in _case_variants(f"{code:04X}")}
    if char in _JSON_SHORT:
        out.add(b"\\" + _JSON_SHORT[char].encode())
    if char == " ":
        out.add(b"+")
    if char != "\ufffd":
        out.add(b"&#")
        out.update(_HTML_NAMED.get(char, ()))
    return frozenset(out)


def _text_form(real: bytes) -> tuple[bytes, int]:
    try:
        chars = [(c, c.encode("utf-8")) for c in real.decode("utf-8")]
    except UnicodeDecodeError:
        chars = [(chr(b) if b < 0x80 else "\ufffd", bytes([b])) for b in real]
    parts = [_char_alternatives(c, enc) for c, enc in chars]
    return b"".join(p for p, _ in parts), sum(n for _, n in parts)


_ESCAPED = {alphabet: tuple(re.escape(alphabet[s:s + 1]) for s in range(64)) for alphabet in (STD, URLSAFE)}


def _b64_form(real: bytes, placeholder: bytes, alphabet: bytes, align: int,
              ) -> tuple[bytes, int, bytes, Callable[[bytes], bytes]]:
    """(pattern, its length, a literal every match contains, replacement) for `real`
    starting `align` bytes into a 3-byte base64 group."""
    lead = 2 * align
    bits = lead + 8 * len(real)
    chars = -(-bits // 6)
    trail = chars * 6 - bits
    value = int.from_bytes(real, "big") << trail
    mask = ((1 << (8 * len(real))) - 1) << trail
    pattern, core = b"", b""
    for i in range(chars):
        shift = 6 * (chars - 1 - i)
        want, keep = (value >> shift) & 63, (mask >> shift) & 63
        if keep == 63:                 # every bit of the character is the value's: that one character
            pattern += _ESCAPED[alphabet][want]
            core += alphabet[want:want + 1]
            continue
        options = [alphabet[s:s + 1] for s in range(64) if s & keep == want & keep]
        if len(options) == 1:
            pattern += re.escape(options[0])
            core += options[0]
        else:
            pattern += b"[" + b"".join(map(re.escape, options)) + b"]"
    index = {c: i for i, c in enumerate(alphabet)}

    def replace(matched: bytes) -> bytes:
        lead_bits = index[matched[0]] >> (6 - lead) if lead else 0
        trail_bits = index[matched[-1]] & ((1 << trail) - 1)
        new_bits = lead + 8 * len(placeholder)
        new_chars = -(-new_bits // 6)
        new_trail = new_chars * 6 - new_bits
        tail = trail_bits >> (trail - new_trail) if new_trail <= trail else trail_bits << (new_trail - trail)
        frame = (lead_bits << (8 * len(placeholder) + new_trail)) | (
            int.from_bytes(placeholder, "big") << new_trail) | tail
        return bytes(alphabet[(frame >> (6 * (new_chars - 1 - i))) & 63] for i in range(new_chars))

    return pattern, chars, core, replace


class Scrubber:
    """A compiled set of replacements (real value -> placeholder), for whole buffers.

    The result is `regex.sub(replace, data)`. For speed the regex only runs near
    "triggers" that every match contains (the raw value, a base64 core, an escape
    like %XX or \\u), found with fast literal scans: large binary or text bodies
    without them pass at memory speed.
    """

    def __init__(self, replacements: Mapping[bytes, bytes]) -> None:
        pieces: list[bytes] = []
        self._handlers: list[Callable[[bytes], bytes]] = []
        self._literals: set[bytes] = set()
        self.max_match = 0
        triggers: set[bytes] = set()
        for real, placeholder in sorted(replacements.items(), key=lambda kv: len(kv[0]), reverse=True):
            real, placeholder = bytes(real), bytes(placeholder)
            if not real:
                raise ValueError("cannot scrub an empty value")
            if real in placeholder:
                raise ValueError("a placeholder must not contain the value it stands for")
            pattern, longest = _text_form(real)
            triggers |= _escape_triggers(real)
            pieces.append(pattern)
            self._handlers.append(lambda _m, p=placeholder: p)
            self._literals.add(real)
            self.max_match = max(self.max_match, longest)
            if len(real) >= MIN_BASE64_VALUE:
                for alphabet in (STD, URLSAFE):
                    for align in range(3):
                        pattern, length, core, handler = _b64_form(real, placeholder, alphabet, align)
                        pieces.append(pattern)
                        self._handlers.append(handler)
                        self._literals.add(core)
                        self.max_match = max(self.max_match, length)
        self.regex = re.compile(b"|".join(b"(" + p + b")" for p in pieces)) if pieces else None
        self._triggers = [
            re.compile(re.escape(head) + b"(?:" + b"|".join(re.escape(t[1:]) for t in sorted(triggers) if t[:1] == head) + b")")
            for head in sorted({t[:1] for t in triggers})
        ]

    def replace(self, match: re.Match[bytes]) -> bytes:
        return self._handlers[match.lastindex - 1](match.group())

    def _regions(self, data: bytes) -> list[tuple[int, int]]:
        """Disjoint, sorted spans of `data` that contain every possible match."""
        points = [m.start() for trigger in self._triggers for m in trigger.finditer(data)]
        for literal in self._literals:
            at = data.find(literal)
            while at != -1:
                points.append(at)
                at = data.find(literal, at + 1)
        points.sort()
        regions: list[tuple[int, int]] = []
        for point in points:
            start, end = max(point - self.max_match, 0), min(point + self.max_match, len(data))
            if regions and start <= regions[-1][1]:
                regions[-1] = (regions[-1][0], max(end, regions[-1][1]))
            else:
                regions.append((start, end))
        return regions

    def could_match(self, data: bytes) -> bool:
        """False only when nothing in `data` can start a match: then `sub` leaves `data`, and every part of it,
        unchanged (every match begins with a trigger or holds a literal, and either would be found in `data`)."""
        if self.regex is None:
            return False
        return any(trigger.search(data) for trigger in self._triggers) or any(
            literal in data for literal in self._literals)

    def finditer(self, data: bytes) -> Iterator[re.Match[bytes]]:
        """The matches `regex.sub` would replace, in order."""
        if self.regex is None:
            return
        for start, end in self._regions(data):
            yield from self.regex.finditer(data, start, end)

    def sub(self, data: bytes) -> bytes:
        data = bytes(data)
        out: list[bytes] = []
        pos = 0
        for match in self.finditer(data):
            out += (data[pos:match.start()], self.replace(match))
            pos = match.end()
        out.append(data[pos:])
        return b"".join(out)

    def sub_text(self, text: str) -> str:
        """Scrub a str (e.g. a header value), keeping undecodable bytes as they were."""
        return self.sub(text.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")


@functools.lru_cache(maxsize=256)
def _scrubber(items: frozenset[tuple[bytes, bytes]]) -> Scrubber:
    return Scrubber(dict(items))


def scrubber_for(replacements: Mapping[bytes, bytes]) -> Scrubber:
    """A `Scrubber` for `replacements`, shared with every earlier caller that asked for the same ones (building one
    costs milliseconds; a Scrubber holds no state, so sharing is safe)."""
    return _scrubber(frozenset(replacements.items()))


def scrub_bytes(data: bytes, replacements: Mapping[bytes, bytes]) -> bytes:
    """`data` with every real value (in every form above) replaced by its placeholder."""
    return Scrubber(replacements).sub(data)


def replacements_for(bindings: Iterable) -> dict[bytes, bytes]:
    """{real value: placeholder} as bytes, from `broker.inject.Binding`s."""
    return {b.value.encode("utf-8"): b.placeholder.encode("utf-8") for b in bindings}


class StreamScrubber:
    """Chunk-by-chunk scrubbing; the concatenated output equals `scrub_bytes` of the whole.

    Holds back at most `max_match - 1` bytes between chunks. As a mitmproxy stream
    callable (`flow.response.stream = StreamScrubber(...)`) it returns a list of
    chunks: never an empty bytes for a mid-stream chunk, which mitmproxy would send
    as a chunked-encoding terminator.
    """

    def __init__(self, replacements: Mapping[bytes, bytes] | Scrubber) -> None:
        self._scrubber = replacements if isinstance(replacements, Scrubber) else Scrubber(replacements)
        self._tail = b""

    def feed(self, chunk: bytes) -> bytes:
        scrubber = self._scrubber
        if scrubber.regex is None:
            return bytes(chunk)
        buf = self._tail + bytes(chunk)
        final_before = len(buf) - scrubber.max_match + 1  # matches starting before this are decided
        out: list[bytes] = []
        pos = 0
        for match in scrubber.finditer(buf):
            if match.start() >= final_before:
                break
            out += (buf[pos:match.start()], scrubber.replace(match))
            pos = match.end()
        keep = max(pos, final_before)
        out.append(buf[pos:keep])
        self._tail = buf[keep:]
        return b"".join(out)

    def flush(self) -> bytes:
        tail, self._tail = self._tail, b""
        return self._scrubber.sub(tail)

    def __call__(self, chunk: bytes) -> list[bytes]:
        data = self.feed(chunk) if chunk else self.flush()
        return [data] if data else []
