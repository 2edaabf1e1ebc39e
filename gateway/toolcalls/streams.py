"""The output of the few commands whose output is known before they run (echo, printf, cat of known text,
base64 -d of known text), so a script piped or written to a file and then run can be read. Pure; never raises."""
from __future__ import annotations

import base64
import binascii
import re

from gateway.toolcalls.words import ansi_c

MAX_TEXT = 64 * 1024


def echo_text(argv: list[str]) -> str:
    """`echo [-neE] WORDS`: the words joined by blanks (escapes interpreted with -e), newline unless -n."""
    words, newline, escapes = argv[1:], True, False
    while words and re.fullmatch(r"-[neE]+", words[0]):
        newline = newline and "n" not in words[0]
        escapes = ("e" in words[0]) or (escapes and "E" not in words[0])
        words = words[1:]
    text = " ".join(words)
    if escapes:
        text = ansi_c(text)
    return text[:MAX_TEXT] + ("\n" if newline else "")


def printf_text(argv: list[str]) -> str | None:
    """`printf FORMAT ARGS`: %s/%b/%d/%c filled from ARGS (the format repeated while arguments remain)."""
    words = argv[1:]
    if words[:1] == ["--"]:
        words = words[1:]
    if not words or words[0] == "-v":
        return None
    fmt, args = words[0], words[1:]
    specs = re.findall(r"%[-+ #0]*\d*(?:\.\d+)?[sbdicxXoufeEgG%]", fmt)
    used = [s for s in specs if s != "%%"]
    out, first = [], True
    while first or (used and args):
        first = False
        chunk, args = args[:len(used)], args[len(used):]
        values = iter(chunk)

        def fill(match: re.Match) -> str:
            if match.group() == "%%":
                return "%"
            value = next(values, "")
            return ansi_c(value) if match.group().endswith("b") else value

        out.append(re.sub(r"%[-+ #0]*\d*(?:\.\d+)?[sbdicxXoufeEgG%]", fill, fmt))
        if len("".join(out)) > MAX_TEXT:
            break
    return ansi_c("".join(out))[:MAX_TEXT]


def base64_text(text: str) -> str | None:
    """The decoded text of `base64 -d`, or None when it is not base64 of UTF-8 text."""
    try:
        data = base64.b64decode(re.sub(r"\s", "", text), validate=True)
        return data.decode("utf-8")[:MAX_TEXT]
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None
