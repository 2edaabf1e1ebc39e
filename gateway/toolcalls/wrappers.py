"""Command wrappers and nested commands: what a command line really runs.

Pure helpers on argv lists: `strip_wrappers` drops sudo/env/nice/timeout/xargs/... and their options,
`shell_script` finds a shell's `-c` script, `_su_command` the command of `su -c`, `find_exec_groups` the
commands `find -exec` runs.
"""
from __future__ import annotations

import posixpath
import re

from gateway.toolcalls.words import _split_words

SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "yash", "fish"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")

# wrapper -> (options that take a separate argument, operands to skip before the command)
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "sudo": (frozenset("-u -g -h -p -C -D -r -t -T -U --user --group --host --prompt --close-from --chdir "
                       "--role --type --command-timeout --other-user".split()), 0),
    "doas": (frozenset({"-u", "-C"}), 0),
    "env": (frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "ionice": (frozenset({"-c", "-n", "-p", "-P", "-u", "--class", "--classdata"}), 0),
    "nohup": (frozenset(), 0),
    "time": (frozenset({"-f", "-o", "--format", "--output"}), 0),
    "timeout": (frozenset({"-s", "-k", "--signal", "--kill-after"}), 1),
    "xargs": (frozenset("-I -n -P -d -L -s -E -a --max-args --max-procs --delimiter --max-lines --max-chars "
                        "--eof --arg-file".split()), 0),
    "command": (frozenset(), 0),
    "builtin": (frozenset(), 0),
    "exec": (frozenset({"-a"}), 0),
    "stdbuf": (frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}), 0),
    "setsid": (frozenset(), 0),
}


def strip_wrappers(argv: list[str]) -> list[str]:
    """argv without leading wrapper commands and their options: `sudo -u x nice rm y` -> ["rm", "y"]."""
    words = list(argv)
    for _ in range(16):
        if not words or posixpath.basename(words[0]) not in _WRAPPERS:
            return words
        name = posixpath.basename(words[0])
        if name == "command" and any(w in ("-v", "-V") for w in words[1:2]):
            return words                      # `command -v rm` only looks rm up
        opts, skip = _WRAPPERS[name]
        i, split = 1, None
        while i < len(words):
            word = words[i]
            if word == "--":
                i += 1
                break
            if name == "env" and _ASSIGNMENT.match(word):
                i += 1
                continue
            if not word.startswith("-") or word == "-":
                break
            key, has_value = word.split("=", 1)[0], "=" in word
            if name == "env" and (key in ("-S", "--split-string") or re.match(r"-S.", word)):
                if has_value:
                    value, i = word.split("=", 1)[1], i + 1
                elif len(word) > 2 and not word.startswith("--"):
                    value, i = word[2:], i + 1
                else:
                    value, i = (words[i + 1] if i + 1 < len(words) else ""), i + 2
                split = _split_words(value)
                break
            i += 2 if key in opts and not has_value else 1
        rest = words[i:]
        words = (split + rest) if split is not None else rest[skip:]
    return words


def shell_script(argv: list[str]) -> str | None:
    """For a shell's effective argv: the `-c` script, "" when it runs a script file, None when it reads stdin."""
    i, inline = 1, False
    while i < len(argv):
        word = argv[i]
        if word == "--":
            i += 1
            break
        if word in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 2
            continue
        if not word.startswith(("-", "+")) or word in ("-", "+"):
            break
        if not word.startswith("--") and "c" in word[1:]:
            inline = True
        i += 1
    if inline:
        return argv[i] if i < len(argv) else ""
    return "" if i < len(argv) else None


def _su_command(argv: list[str]) -> str | None:
    for i, word in enumerate(argv[1:], 1):
        if word in ("-c", "--command"):
            return argv[i + 1] if i + 1 < len(argv) else None
        if word.startswith("--command="):
            return word.split("=", 1)[1]
        if word.startswith("-c"):
            return word[2:]
    return None


def find_exec_groups(argv: list[str]) -> list[list[str]]:
    """The commands a `find` argv runs with -exec/-execdir/-ok/-okdir (up to `;` or `+`)."""
    groups, i = [], 1
    while i < len(argv):
        if argv[i] in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(argv) and argv[j] not in (";", "+"):
                j += 1
            if j > i + 1:
                groups.append(argv[i + 1:j])
            i = j
        i += 1
    return groups
