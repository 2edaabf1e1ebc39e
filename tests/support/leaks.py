"""What a leaked value looks like in bytes a test reads: the value itself, upper-cased, and base64 of it in both
alphabets (standard and URL-safe) at each of the three byte alignments inside a larger blob."""
from __future__ import annotations

import base64


def base64_cores(value: bytes) -> set[bytes]:
    """The base64 characters made of the value's bits alone, for each alignment and alphabet: any base64 blob
    that carries the value contains one of them (the edge characters that mix in neighbouring bits are cut)."""
    cores = set()
    for lead in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            text = encode(b"\0" * lead + value + b"\0\0").rstrip(b"=")
            first = -(-8 * lead // 6)                          # skip the characters holding lead bits
            last = (8 * (lead + len(value))) // 6              # characters made only of lead + value bits
            cores.add(text[first:last])
    return cores


def leaked(data: bytes, value: str | bytes) -> bool:
    raw = value.encode() if isinstance(value, str) else value
    return raw in data or raw.upper() in data or any(core in data for core in base64_cores(raw))
