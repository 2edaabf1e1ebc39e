"""Command wrappers and multi-call binaries: what a command line really runs (`unwrap`).

Pure helpers on argv lists. `unwrap(["sudo", "-u", "x", "nice", "rm", "y"])` -> the argv that runs (`rm y`) plus
what the wrappers add: environment assignments (env, sudo, cross-env), a shell script run instead of argv
(`su -c`, `flock -c`, `watch`, `script -c`, `nix-shell --run`, `parallel`), operands read from stdin (xargs,
parallel), an interactive shell (`sudo -i`, `su`, `chroot DIR`), a working directory (`env -C`), files the
wrapper itself writes (`script FILE`, `strace -o`), a remote host (`parallel -S`, `systemd-run -H`).
`shell_script` finds a shell's `-c` script, `find_exec_groups` the commands `find -exec` runs.
The table of wrappers and their options is the policy's data (`wrappers` in `sandgate/config/toolcall/data.json`,
`WrapperTable`); what is particular to one wrapper (gdb --args, su -, env -S, xargs, sudo -e, script FILE) is here.
"""
from __future__ import annotations

import json
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from gateway.toolcalls.words import split_words

SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "yash", "fish", "tcsh", "csh", "rbash",
                    "busybox-sh", "posh", "oksh", "loksh", "elvish", "nu", "xonsh"})
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class _Spec:
    args: str = ""                 # options taking a separate argument (space separated)
    skip: int = 0                  # operands before the command (timeout DURATION, flock FILE, chroot DIR)
    assignments: bool = False      # NAME=value words set the environment (env, sudo, cross-env)
    script: str = ""               # options whose argument is a shell script (su -c, flock -c, nix-shell --run)
    join: bool = False             # the command words are joined and run by `sh -c` (watch)
    interactive: bool = False      # without a command: an interactive shell
    stdin_operands: bool = False   # the command's operands come from stdin (xargs)
    chdir: str = ""                # options setting the working directory
    writes: str = ""               # options naming a file the wrapper writes
    remote: str = ""               # options naming a remote host the command runs on
    no_command: str = ""           # options that mean "no command runs" (command -v, sudo -l, taskset -p)
    applet: bool = False           # multi-call binary: the next word is the program (busybox rm)

    def opts(self, which: str) -> frozenset[str]:
        return frozenset(getattr(self, which).split())


_GDB_ARGS = "--args"
_SPEC_FIELDS = frozenset(("args", "script", "chdir", "writes", "remote", "no_command"))
_SPEC_FLAGS = frozenset(("assignments", "join", "interactive", "stdin_operands", "applet"))


def _spec_of(raw: Mapping[str, Any]) -> _Spec:
    """A wrapper's spec from its data entry (unknown or mistyped fields are ignored)."""
    fields: dict[str, Any] = {k: v for k, v in raw.items() if k in _SPEC_FIELDS and isinstance(v, str)}
    fields.update({k: v for k, v in raw.items() if k in _SPEC_FLAGS and isinstance(v, bool)})
    skip = raw.get("skip", 0)
    if isinstance(skip, int) and not isinstance(skip, bool) and 0 <= skip <= 4:
        fields["skip"] = skip
    return _Spec(**fields)


@dataclass(frozen=True)
class WrapperTable:
    """The wrappers of a policy's data (`data.sandgate.config.toolcall.wrappers`): per program, or per
    "program subcommand" (`uv run`, `npm exec`), the options of `_Spec`."""
    single: Mapping[str, _Spec] = field(default_factory=dict)
    double: Mapping[tuple[str, str], _Spec] = field(default_factory=dict)

    @classmethod
    def of(cls, raw: Any) -> "WrapperTable":
        single: dict[str, _Spec] = {}
        double: dict[tuple[str, str], _Spec] = {}
        if isinstance(raw, Mapping):
            for key, spec in raw.items():
                words = key.split() if isinstance(key, str) else []
                if not isinstance(spec, Mapping) or not 1 <= len(words) <= 2:
                    continue
                if len(words) == 1:
                    single[words[0]] = _spec_of(spec)
                else:
                    double[(words[0], words[1])] = _spec_of(spec)
        return cls(single, double)

    def names(self) -> frozenset[str]:
        return frozenset(self.single) | frozenset(tool for tool, _sub in self.double)


_default: list[WrapperTable] = []


def default_wrappers() -> WrapperTable:
    """The wrappers of the shipped policy directory (read once)."""
    if not _default:
        from gateway.policy.loader import default_policy_dir

        path = default_policy_dir() / "sandgate" / "config" / "toolcall" / "data.json"
        _default.append(WrapperTable.of(json.loads(path.read_text(encoding="utf-8")).get("wrappers")))
    return _default[0]


@dataclass
class Unwrapped:
    """What a command line really runs once its wrappers are removed."""
    argv: list[str]
    wrappers: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    script: str | None = None          # a shell script run instead of argv
    stdin_operands: bool = False       # operands come from stdin at run time (xargs, parallel)
    interactive: bool = False          # an interactive shell: what it runs is unseen
    chdir: str | None = None
    writes: list[str] = field(default_factory=list)
    remote: str | None = None
    replace: str | None = None         # xargs -I: the word replaced by each stdin item
    separator: str | None = None       # xargs: what separates its items (-0, -d, lines for -I/-L); None: blanks


def _spec_for(words: list[str], table: WrapperTable) -> tuple[_Spec | None, int, str]:
    if not words:
        return None, 0, ""
    name = posixpath.basename(words[0])
    if len(words) > 1 and (name, words[1]) in table.double:
        return table.double[(name, words[1])], 2, f"{name} {words[1]}"
    if name == "gdb" and _GDB_ARGS not in words:
        return None, 0, ""
    return table.single.get(name), 1, name


def unwrap(argv: list[str], program_of: Callable[[str], str | None] | None = None,
           table: WrapperTable | None = None) -> Unwrapped:
    """argv without leading wrappers and their options: `sudo -u x nice rm y` -> Unwrapped(["rm", "y"], ...).
    `program_of(word)` names the program a renamed one is (a link or copy made earlier), at every layer;
    `table` the policy's wrappers (the shipped ones when None)."""
    table = table if table is not None else default_wrappers()
    out = Unwrapped(list(argv))
    for _ in range(16):
        behind = program_of(out.argv[0]) if program_of is not None and out.argv else None
        if behind is not None:
            out.argv[0] = behind
        spec, start, name = _spec_for(out.argv, table)
        if spec is None:
            return out
        words = out.argv
        out.wrappers.append(name)
        if not _strip_one(spec, name, words, start, out):
            return out
    return out


def _strip_one(spec: _Spec, name: str, words: list[str], i: int, out: Unwrapped) -> bool:
    """Remove one wrapper from out.argv; False when no command follows (out.argv is then final)."""
    takes, scripts = spec.opts("args"), spec.opts("script")
    skip, split = spec.skip, None
    if name == "gdb":
        i = words.index(_GDB_ARGS) + 1
    if spec.applet:
        rest = words[1:]
        if rest and rest[0].startswith("--coreutils-prog="):
            rest = [rest[0].split("=", 1)[1]] + rest[1:]
        elif not rest or rest[0].startswith("-"):
            return False                           # `busybox --list`: no applet runs
        out.argv = rest
        return True
    while i < len(words):
        word = words[i]
        if word == "--":
            i += 1
            break
        if spec.assignments and ASSIGNMENT.match(word):
            key, value = word.split("=", 1)
            out.env[key] = value
            i += 1
            continue
        if not word.startswith("-") or word == "-" or (name == "nice" and re.fullmatch(r"-\d+", word)):
            if name == "nice" and word.startswith("-"):
                i += 1
                continue
            if skip and not (name == "su" and word == "-"):
                skip -= 1
                i += 1
                continue
            if name in ("su", "runuser", "sg") and word == "-":
                i += 1
                continue
            break
        key, value, i = read_option(word, words, i, takes | scripts)
        if name == "runuser" and key in ("-u", "--user"):
            skip = 0                               # runuser -u USER CMD...: no user operand
        if key in spec.opts("no_command"):
            out.argv = [] if name != "command" else words
            return False
        if key in ("-S", "--split-string") and name == "env":
            split = split_words(value or "")
            break
        if key in scripts and value is not None:
            out.script = value
        elif key in spec.opts("chdir") and value is not None:
            out.chdir = value
        elif key in spec.opts("writes") and value is not None:
            out.writes.append(value)
        elif key in spec.opts("remote") and value is not None:
            out.remote = value
        elif name == "xargs" and key in ("-I", "-i", "--replace"):
            out.replace = value or "{}"
            out.separator = out.separator or "\n"
        elif name == "xargs" and key in ("-0", "--null"):
            out.separator = "\0"
        elif name == "xargs" and key in ("-d", "--delimiter") and value is not None:
            out.separator = value.encode().decode("unicode_escape", "replace") if value else "\n"
        elif name == "xargs" and key in ("-L", "--max-lines"):
            out.separator = out.separator or "\n"
        elif name == "sudo" and key in ("-e", "--edit"):
            out.argv = ["sudoedit"] + words[i:]
            return False
    rest = words[i:] if split is None else split + words[i:]
    while rest and not spec.join and ASSIGNMENT.match(rest[0]):   # `timeout 5 A=1 cmd`: fails in bash; env (strict)
        key, value = rest[0].split("=", 1)
        out.env[key] = value
        rest = rest[1:]
    if name in ("su", "runuser") and skip == 0 and out.script is None and "-u" not in words[:i]:
        rest = []                                  # `su USER ARGS`: ARGS go to an interactive shell
    if name == "script":
        out.writes.extend(rest[:1] or ["typescript"])
        rest = []
    if spec.stdin_operands:
        out.stdin_operands = True
        if not rest:
            rest = ["echo"]
    if spec.join and rest:
        out.script = " ".join(rest)
        rest = []
    out.argv = rest
    if out.script is not None:
        out.argv = []
        return False
    if not rest:
        out.interactive = spec.interactive
        return False
    if rest and posixpath.basename(rest[0]).endswith(".py") and name in ("uv run", "poetry run", "pdm run"):
        out.argv = ["python"] + rest
    return True


def read_option(word: str, words: list[str], i: int, takes: frozenset[str]) -> tuple[str, str | None, int]:
    """(option, its value or None, next index) for the option word at words[i]; a short option's value may be
    attached (-m shell). Shared by the wrapper table's reader and the carriers' reader."""
    if word.startswith("--"):
        key, eq, value = word.partition("=")
        if eq:
            return key, value, i + 1
        if key in takes and i + 1 < len(words):
            return key, words[i + 1], i + 2
        return key, None, i + 1
    for pos in range(1, len(word)):
        short = "-" + word[pos]
        if short in takes:
            if pos + 1 < len(word):
                return short, word[pos + 1:], i + 1
            if i + 1 < len(words):
                return short, words[i + 1], i + 2
            return short, None, i + 1
    return word[:2], None, i + 1


def parallel_script(argv: list[str]) -> tuple[str, bool, str | None]:
    """GNU parallel's argv -> (the shell script it runs, operands from stdin?, remote host or None)."""
    takes = frozenset("-j -P -a --arg-file --colsep -C -I --joblog --results --delay --timeout -n -N -L "
                      "--tmpdir --workdir --env --jobs --max-args -E --eof -d --delimiter --halt --retries "
                      "--tag-string --basefile --bf -S --sshlogin --sshloginfile --slf".split())
    i, remote = 1, None
    while i < len(argv) and argv[i].startswith("-") and argv[i] not in (":::", "::::"):
        key, value, i = read_option(argv[i], argv, i, takes)
        if key in ("-S", "--sshlogin", "--sshloginfile", "--slf") and value not in (None, ":"):
            remote = value
    command, args, stdin = [], [], True
    while i < len(argv) and argv[i] not in (":::", "::::", ":::+", "::::+"):
        command.append(argv[i])
        i += 1
    if i < len(argv):
        stdin = argv[i].startswith("::::")
        args = [w for w in argv[i + 1:] if w not in (":::", "::::", ":::+", "::::+")] if not stdin else []
    text = " ".join(command) or "echo"
    items = [shlex.quote(a) for a in args] or ["$PARALLEL_ITEM"]
    lines = [re.sub(r"\{[^{}\s]{0,3}\}", item, text) if re.search(r"\{[^{}\s]{0,3}\}", text) else f"{text} {item}"
             for item in items]
    return "\n".join(lines), stdin, remote


def _shell_operands(argv: list[str]) -> tuple[int, bool]:
    """(index of a shell's first operand, whether -c was given) for a shell's argv."""
    i, inline = 1, False
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return i + 1, inline
        if word in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 2
            continue
        if not word.startswith(("-", "+")) or word in ("-", "+"):
            break
        if not word.startswith("--") and "c" in word[1:]:
            inline = True
        i += 1
    return i, inline


def shell_script(argv: list[str]) -> str | None:
    """For a shell's effective argv: the `-c` script, "" when it runs a script file, None when it reads stdin."""
    i, inline = _shell_operands(argv)
    if inline:
        return argv[i] if i < len(argv) else ""
    return "" if i < len(argv) and argv[i] not in ("-", "+") else None


def shell_script_file(argv: list[str]) -> str | None:
    """The script file a shell argv runs (`bash -e x.sh` -> "x.sh"), or None."""
    i, inline = _shell_operands(argv)
    return argv[i] if not inline and i < len(argv) and argv[i] not in ("-", "+") else None


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
