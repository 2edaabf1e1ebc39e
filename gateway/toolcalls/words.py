"""Shell words: unquoting (never expanding) bare, double-quoted and $'...' text, and a forgiving shlex split.

Pure: text in, text out; never raises on bad input.
"""
from __future__ import annotations

import re
import shlex


def split_words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


_ESCAPED = re.compile(r"\\(.)", re.S)
_ESCAPED_DQ = re.compile(r'\\([\\"$`])')


def unescape_word(text: str) -> str:
    return _ESCAPED.sub(r"\1", text) if "\\" in text else text      # most words hold no backslash


def unescape_dq(text: str) -> str:
    return _ESCAPED_DQ.sub(r"\1", text) if "\\" in text else text


_ANSI = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "v": "\v"}


def ansi_c(text: str) -> str:
    def repl(match: re.Match) -> str:
        esc = match.group(1)
        try:
            if esc[0] in "xuU" and len(esc) > 1:
                return chr(int(esc[1:], 16))
            if esc[0] in "01234567":
                return chr(int(esc, 8))
        except (ValueError, OverflowError):
            return ""
        return _ANSI.get(esc, esc)

    return re.sub(r"\\(x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8}|[0-7]{1,3}|.)", repl, text, flags=re.S)
