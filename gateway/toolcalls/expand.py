"""Static word expansion for the facts: brace expansion, variables assigned earlier in the command line, and the
few command substitutions whose output is known (`$(pwd)`, `$(echo x)`, `$(whoami)`).

Pure, bounded and conservative: a word expands to a list of candidate words, or stays as written when it
cannot be known (the path facts then call it dynamic). Never raises.
"""
from __future__ import annotations

import itertools
import re

MAX_CANDIDATES = 64          # more candidates than this and a word is left unexpanded
MAX_WORD = 64 * 1024         # a longer expansion is left unexpanded (`a=$a$a` repeated grew without bound)
USER = "sandbox-user"        # $USER, $(whoami): some user name (only its shape matters: /home/$USER is a home)

_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*|[0-9@*#])\}|([A-Za-z_][A-Za-z0-9_]*|[0-9@*#]))")
_USER_FORMS = re.compile(r"\$\{?(?:USER|LOGNAME)\}?(?![A-Za-z0-9_])|\$\((?:whoami|id -un)\)|`(?:whoami|id -un)`")
_PWD_FORMS = re.compile(r"\$\(\s*pwd\s*\)|`\s*pwd\s*`")
_SUBSTITUTION = re.compile(r"\$\(([^()`]*)\)|`([^`]*)`")
# ${HOME...} parameter forms that still name the home directory, and those naming its parent
_HOME_SAME = re.compile(r"\$\{HOME(?::?[-=][^}]*|%%?/+)\}")
_HOME_PARENT = re.compile(r"\$\{HOME%%?/\*\}")


def expand_braces(word: str) -> list[str]:
    """Bash brace expansion (`{a,b}`, `{1..3}`, `{a..c}`), bounded. Quotes are already gone, so quoted braces
    expand too: conservative for the facts (more candidates, never fewer)."""
    out = _braces(word, 0)
    return out if out is not None and len(out) <= MAX_CANDIDATES else [word]


def _braces(word: str, depth: int) -> list[str] | None:
    if depth > 8 or "{" not in word:
        return [word]
    span = _brace_span(word)
    if span is None:
        return [word]
    start, end, parts = span
    head, tail = word[:start], word[end + 1:]
    tails = _braces(tail, depth + 1)
    if tails is None:
        return None
    out: list[str] = []
    for part in parts:
        inner = _braces(part, depth + 1)
        if inner is None:
            return None
        for a, b in itertools.product(inner, tails):
            out.append(head + a + b)
            if len(out) > MAX_CANDIDATES:
                return None
    return out


def _brace_span(word: str) -> tuple[int, int, list[str]] | None:
    """The first expandable {...}: (start, end, alternatives)."""
    for start, char in enumerate(word):
        if char != "{" or (start and word[start - 1] == "$"):
            continue
        depth, commas = 0, []
        for end in range(start, len(word)):
            c = word[end]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    body = word[start + 1:end]
                    if commas:
                        cuts = [start + 1] + [i + 1 for i in commas]
                        stops = commas + [end]
                        return start, end, [word[a:b] for a, b in zip(cuts, stops)]
                    seq = _sequence(body)
                    if seq is not None:
                        return start, end, seq
                    break
            elif c == "," and depth == 1:
                commas.append(end)
    return None


def _sequence(body: str) -> list[str] | None:
    match = re.fullmatch(r"(-?\d{1,6})\.\.(-?\d{1,6})(?:\.\.(-?\d{1,4}))?|([A-Za-z])\.\.([A-Za-z])", body)
    if not match:
        return None
    if match.group(4):
        a, b = ord(match.group(4)), ord(match.group(5))
        step = 1 if b >= a else -1
        return [chr(c) for c in range(a, b + step, step)][:MAX_CANDIDATES + 1]
    a, b = int(match.group(1)), int(match.group(2))
    step = abs(int(match.group(3) or 1)) or 1
    step = step if b >= a else -step
    count = abs(b - a) // abs(step) + 1
    if count > MAX_CANDIDATES:
        return None
    return [str(a + i * step) for i in range(count)]


def substitute(word: str, variables: dict[str, list[str]], cwd: str | None) -> list[str]:
    """Candidates for one word: variables known from earlier in the line, `$(pwd)`, `$(echo x)`, $USER forms.
    Unknown variables stay as written."""
    if "$" not in word and "`" not in word and not (word[:1] == "~" and "HOME" in variables):
        return [word]            # every form below starts with `$` or a backquote (or is `~` with HOME known)
    word = _USER_FORMS.sub(USER, word)
    if "HOME" in variables and re.match(r"~(?=/|$)", word):
        word = "$HOME" + word[1:]
    word = _HOME_PARENT.sub("~/..", word)
    word = _HOME_SAME.sub("~", word)
    if cwd is not None:
        word = _PWD_FORMS.sub(lambda _m: cwd, word)
    word = _SUBSTITUTION.sub(_literal_output, word)
    if "$" not in word or not variables:
        return [word]
    pieces: list[list[str]] = []
    pos = 0
    for match in _VAR.finditer(word):
        name = match.group(1) or match.group(2)
        if name not in variables:
            continue
        pieces.append([word[pos:match.start()]])
        values = variables[name]
        pieces.append(values if values else [""])
        pos = match.end()
    if not pieces:
        return [word]
    pieces.append([word[pos:]])
    out: list[str] = []
    for combo in itertools.product(*pieces):
        if sum(len(p) for p in combo) > MAX_WORD:      # `a=$a$a` doubles: past this, leave it unexpanded
            return [word]
        out.append("".join(combo))
        if len(out) > MAX_CANDIDATES:
            return [word]
    return out


def _literal_output(match: re.Match) -> str:
    """A command substitution whose output is known (`$(echo ~)`, `$(printf %s /)`), or itself."""
    from gateway.toolcalls.shell import parse_shell            # the parser does not import this module
    from gateway.toolcalls.streams import echo_text, printf_text

    from gateway.toolcalls.streams import base64_text

    inner = match.group(1) if match.group(1) is not None else match.group(2)
    commands = [c for c in parse_shell(inner)["commands"] if c["argv"]] if len(inner) < 1000 else []
    if not commands or any(c["redirects"] for c in commands) or any(c["op"] != "|" for c in commands[1:]):
        return match.group()
    argv = commands[0]["argv"]
    text = echo_text(argv) if argv[0] == "echo" else printf_text(argv) if argv[0] == "printf" else None
    for later in commands[1:]:                 # `echo ... | base64 -d`, `... | cat`
        words = later["argv"]
        if text is not None and words[0] == "base64" and any(w in ("-d", "--decode", "-D") for w in words[1:]):
            text = base64_text(text)
        elif not (words == ["cat"] or words == ["cat", "-"]):
            text = None
    return match.group() if text is None else text.rstrip("\n")


def split_fields(text: str, variables: dict[str, list[str]]) -> list[str]:
    """An unquoted expansion split into words as bash does: on blanks, or on the characters of an IFS set
    earlier in the line (`IFS=,; x="rm,-rf,~"; $x` runs rm)."""
    if "IFS" not in variables:
        return text.split()
    chars = "".join(dict.fromkeys("".join(variables["IFS"])))
    if not chars:
        return [text] if text else []
    return [f for f in re.split("[" + re.escape(chars) + "]+", text) if f]


def expand_word(word: str, variables: dict[str, list[str]], cwd: str | None, quoting: str = "none") -> list[str]:
    """substitute() then brace expansion, as bash does for the word's quoting ("none", "double": variables
    only, "single": nothing); an unquoted whole-word variable whose value holds blanks splits into words."""
    if quoting == "single":
        return [word]
    out: list[str] = []
    for candidate in substitute(word, variables, cwd):
        for expanded in (expand_braces(candidate) if quoting == "none" else [candidate]):
            out.append(expanded)
            if quoting == "none" and _VAR.fullmatch(word):
                fields = split_fields(expanded, variables)
                if len(fields) > 1:
                    out.extend(fields)
    return list(dict.fromkeys(out))[:MAX_CANDIDATES] or [word]
