"""Placeholders: the per-session stand-ins the sandbox holds instead of real credentials.

Pure functions. A placeholder is shaped like the credential it stands for (same
prefix, same total length where known) so client libraries that check a token's
format accept it, and carries enough randomness that nobody can guess another
session's placeholder. It contains only URL-unreserved characters, so it passes
through URLs, headers, JSON and HTTP Basic credentials without being encoded.
"""

from __future__ import annotations

import math
import re
import secrets
import string
from dataclasses import dataclass
from typing import Protocol

BASE62 = string.ascii_letters + string.digits
DEFAULT_PREFIX = "sgph_"
DEFAULT_RANDOM_CHARS = 40
TARGET_BITS = 128
MIN_BITS = 96
MAX_LENGTH = 4096

_PREFIX = re.compile(r"[A-Za-z0-9._~-]*\Z")
_ALPHABET = re.compile(r"[A-Za-z0-9_-]+\Z")


class RandomSource(Protocol):
    def choice(self, seq: str) -> str: ...


@dataclass(frozen=True)
class PlaceholderFormat:
    """The shape of a credential: a fixed prefix and the total length (prefix included)."""

    prefix: str = ""
    length: int | None = None
    alphabet: str = BASE62

    def __post_init__(self) -> None:
        if not _PREFIX.match(self.prefix):
            raise ValueError("placeholder prefix may contain only A-Z a-z 0-9 . _ ~ -")
        if not _ALPHABET.match(self.alphabet) or len(set(self.alphabet)) != len(self.alphabet):
            raise ValueError("placeholder alphabet must be distinct characters from A-Z a-z 0-9 _ -")
        if len(self.alphabet) < 2:
            raise ValueError("placeholder alphabet needs at least two characters")
        if self.length is not None:
            if isinstance(self.length, bool) or not isinstance(self.length, int):
                raise ValueError("placeholder length must be an integer")
            if not 0 < self.length <= MAX_LENGTH:
                raise ValueError(f"placeholder length must be between 1 and {MAX_LENGTH}")
            random_chars = self.length - len(self.prefix)
            if random_bits(random_chars, self.alphabet) < MIN_BITS:
                raise ValueError(
                    f"placeholder length {self.length} leaves {max(random_chars, 0)} random characters "
                    f"after the prefix: fewer than {MIN_BITS} bits"
                )


def random_bits(chars: int, alphabet: str = BASE62) -> float:
    """Bits of randomness in `chars` characters drawn uniformly from `alphabet`."""
    return max(chars, 0) * math.log2(len(alphabet))


def _chars_for(bits: int, alphabet: str) -> int:
    return math.ceil(bits / math.log2(len(alphabet)))


def parse_format(text: str | None) -> PlaceholderFormat | None:
    """Parse a `format` config value: "PREFIX:LENGTH", "PREFIX", ":LENGTH" or "".

    "ghp_:40" is prefix "ghp_" and total length 40. None or "" means no format.
    ValueError when malformed or when the length leaves fewer than MIN_BITS random bits.
    """
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError("placeholder format must be a string like 'ghp_:40'")
    text = text.strip()
    if not text:
        return None
    prefix, sep, length_text = text.rpartition(":")
    if not sep:
        return PlaceholderFormat(prefix=text)
    if not length_text.isascii() or not length_text.isdigit():
        raise ValueError(f"placeholder format {text!r}: length must be a number (like 'ghp_:40')")
    return PlaceholderFormat(prefix=prefix, length=int(length_text))


def make_placeholder(fmt: PlaceholderFormat | None, real_length: int | None,
                     rand: RandomSource | None = None) -> str:
    """A fresh placeholder shaped like the credential.

    Total length: the format's length if it has one, else `real_length` if known,
    else the prefix ("sgph_" without a format) plus 40 random characters. At least
    128 random bits unless that length makes it impossible; ValueError below 96.
    """
    rand = rand or secrets.SystemRandom()
    if fmt is None:
        fmt = PlaceholderFormat(prefix="" if real_length is not None else DEFAULT_PREFIX)
    alphabet = fmt.alphabet
    if fmt.length is not None:
        total = fmt.length
    elif real_length is not None:
        if isinstance(real_length, bool) or not isinstance(real_length, int) or real_length <= 0:
            raise ValueError("real_length must be a positive integer")
        total = real_length
    else:
        total = len(fmt.prefix) + max(DEFAULT_RANDOM_CHARS, _chars_for(TARGET_BITS, alphabet))
    if total > MAX_LENGTH:
        raise ValueError(f"placeholder length {total} exceeds {MAX_LENGTH}")
    count = total - len(fmt.prefix)
    if random_bits(count, alphabet) < MIN_BITS:
        raise ValueError(f"a placeholder of length {total} cannot carry {MIN_BITS} random bits")
    return fmt.prefix + "".join(rand.choice(alphabet) for _ in range(count))
