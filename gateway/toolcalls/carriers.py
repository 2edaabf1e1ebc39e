"""Commands carried in the arguments of programs sandgate does not model, and of remote or container runners.

What sandgate cannot read is not allowed, and what it can read in an unknown program's arguments is decided as
if it ran: `cgexec -g cpu:x bash -c 'rm -rf /'`, `setpriv terraform destroy`, `hyperfine 'make clean'`,
`distrobox enter box -- rm -rf ~`. `unknown_carried(argv, tables)` finds, in the arguments of a program the
tables do not know, every quoted script argument (a word with blanks or shell operators, also as an option's
`=VALUE`), the first word that names a program sandgate knows with what follows it (a shell or interpreter only
when it carries code: `-c`, a script file), and anything after `--`.

`executor_carried(spec, argv, used)` reads a runner whose command runs elsewhere (an `Executor` of the tables:
`ssh HOST CMD`, `docker exec C CMD`, `kubectl exec POD -- CMD`, `ansible H -m shell -a CMD`, `salt T cmd.run CMD`,
`pssh -H h CMD`): its target and the commands it carries.
Pure helpers on words; never raise.
"""
from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Callable

from gateway.toolcalls.interpreters import code_source, language_of
from gateway.toolcalls.tables import Executor, Tables
from gateway.toolcalls.wrappers import SHELLS, read_option, shell_script, unwrap

_SCRIPT = re.compile(r"\s|[;&|]")
_SHELL_ARGS = re.compile(r"^(?:chdir|creates|removes|executable|warn|stdin|cwd|runas|shell|env|timeout|"
                         r"python_shell|umask)=\S*$")
MAX_CARRIED = 16


@dataclass(frozen=True)
class Carried:
    kind: str              # "argv": words to run; "script": a command line
    argv: tuple[str, ...] = ()
    script: str = ""


def _runs_something(words: list[str], tables: Tables) -> bool:
    """Whether `words` run a command of their own (not an interactive shell or interpreter waiting for stdin)."""
    u = unwrap(words, table=tables.wrappers)
    if u.script is not None:
        return True
    if not u.argv:
        return False
    name = posixpath.basename(u.argv[0])
    if name in SHELLS:
        return shell_script(u.argv) is not None
    if language_of(name) is not None:
        source = code_source(name, u.argv)
        return source is None or not source.stdin or source.inline is not None or source.script is not None
    return True


def _names_program(word: str, tables: Tables) -> bool:
    if not word or word.startswith("-") or ("/" in word and not word.startswith("/")):
        return False
    return tables.known(posixpath.basename(word))


def unknown_carried(argv: list[str], tables: Tables,
                    written_script: Callable[[str], bool] | None = None) -> list[Carried]:
    """The commands an unknown program's arguments carry (see the module's docstring); `written_script(word)`
    says whether a word names a script the session wrote (it is run as that script)."""
    out: list[Carried] = []
    words = argv[1:]
    first = True                       # the first operand may be the program's own subcommand (`ruff format`)
    for i, word in enumerate(words):
        if len(out) >= MAX_CARRIED:
            break
        if first and not word.startswith("-"):
            first = False
            if word in tables.subcommand_words:
                continue
        if word == "--":
            rest = words[i + 1:]
            if rest and not rest[0].startswith("-"):
                out.append(Carried("argv", tuple(rest)))
                break
            continue                    # `capsh -- -c 'CMD'`: options of what runs next; keep reading
        value = word
        if word.startswith("-"):
            key, eq, value = word.partition("=")
            if not eq or not value:
                continue
        if _SCRIPT.search(value):
            out.append(Carried("script", script=value))
            continue
        if written_script is not None and value is word and written_script(word):
            out.append(Carried("argv", (word, *words[i + 1:])))
            break
        if _names_program(value, tables):
            candidate = [value] + words[i + 1:]
            if _runs_something(candidate, tables):
                out.append(Carried("argv", tuple(candidate)))
                break
    return out


def _key_end(argv: list[str], used: int) -> int:
    """Index in argv just past the `used` subcommand words of an executor key (`docker exec`: past `exec`)."""
    i, seen = 1, 0
    while i < len(argv) and seen < used:
        if not argv[i].startswith("-"):
            seen += 1
        i += 1
    return i


def executor_carried(spec: Executor, argv: list[str], used: int) -> tuple[str, list[Carried]]:
    """(the target host or container, or "", the commands carried) for an executor's argv; `used`: how many
    subcommand words its key took."""
    return _executor(spec, argv, used)[:2]


def executor_context(spec: Executor, argv: list[str], used: int) -> tuple[list[tuple[str, str]], str | None]:
    """([(host path, path in the container)] it mounts, the directory its command starts in or None)."""
    return _executor(spec, argv, used)[2:]


def _mount(option: str, value: str) -> tuple[str, str] | None:
    if option == "--mount":
        fields = dict(part.split("=", 1) for part in value.split(",") if "=" in part)
        source = fields.get("source") or fields.get("src")
        target = fields.get("target") or fields.get("destination") or fields.get("dst")
        if source and target and fields.get("type", "volume") == "bind":
            return source, target
        return None
    parts = value.split(":")
    if len(parts) >= 2 and parts[0].startswith(("/", "~", ".", "$")) and parts[1].startswith("/"):
        return parts[0], parts[1]
    return None


def _executor(spec: Executor, argv: list[str], used: int) -> tuple[str, list[Carried], list[tuple[str, str]],
                                                                    str | None]:
    takes = spec.options | spec.target_options | spec.script_options | spec.module_options | spec.args_options | \
        spec.mount_options | spec.workdir_options | spec.entrypoint_options
    i = _key_end(argv, used)
    target, targets = "", spec.targets
    scripts: list[str] = []
    module, module_args = spec.default_module, None
    operands: list[str] = []
    command: list[str] | None = None
    mounts: list[tuple[str, str]] = []
    workdir: str | None = None
    entrypoint: str | None = None
    while i < len(argv):
        word = argv[i]
        if word == "--":
            command = argv[i + 1:]
            break
        # a container runner's options come before the target (`docker exec -it C CMD`); ssh, the remote and module
        # runners and those that wait for `--` read them anywhere
        past_target = spec.targets > 0 and not targets and not (spec.join or spec.modules or spec.functions or
                                                                spec.separator or spec.remote)
        if word.startswith("-") and word != "-" and not past_target:
            key, value, i = read_option(word, argv, i, takes)
            if key in spec.command_options:
                command = argv[i:]
                break
            if value is None:
                continue
            if key in spec.script_options:
                scripts.append(value)
            elif key in spec.target_options:
                target = target or value
            elif key in spec.module_options:
                module = value
            elif key in spec.args_options:
                module_args = value
            elif key in spec.mount_options:
                mount = _mount(key, value)
                if mount is not None:
                    mounts.append(mount)
            elif key in spec.workdir_options:
                workdir = value
            elif key in spec.entrypoint_options:
                entrypoint = value
            continue
        if targets:
            target = target or word
            targets -= 1
            i += 1
            continue
        if spec.modules or spec.functions or spec.command_options:     # the command comes with an option
            operands.append(word)
            i += 1
            continue
        command = argv[i:]
        break
    out = [Carried("script", script=s) for s in scripts]
    if entrypoint is not None:
        command = [entrypoint, *(command or [])]
    if spec.separator or spec.join or not (spec.modules or spec.functions):
        if command:
            out.append(Carried("script", script=" ".join(command)) if spec.join else Carried("argv", tuple(command)))
    if spec.modules:
        kind = spec.modules.get(module, "")
        out += _module(kind, module_args or "")
    if spec.functions and operands:
        kind = spec.functions.get(operands[0], "")
        args = [a for a in operands[1:] if not _SHELL_ARGS.match(a)]
        if kind == "shell" and args:
            out.append(Carried("script", script=" ".join(args)))
        elif kind == "delete" and args:
            out.append(Carried("argv", ("rm", "-rf", "--", *args)))
    return target, out[:MAX_CARRIED], mounts[:MAX_CARRIED], workdir


def _module(kind: str, args: str) -> list[Carried]:
    if kind == "shell":
        words = args.split()
        while words and _SHELL_ARGS.match(words[0]):
            words = words[1:]
        text = args[args.index(words[0]):] if words else ""
        return [Carried("script", script=text)] if text else []
    if kind == "file":
        fields = dict(w.split("=", 1) for w in args.split() if "=" in w)
        path = fields.get("path") or fields.get("dest") or fields.get("name")
        state = fields.get("state", "file")
        if not path:
            return []
        if state == "absent":
            return [Carried("argv", ("rm", "-rf", "--", path))]
        if state == "directory":
            return [Carried("argv", ("mkdir", "-p", "--", path))]
        return [Carried("argv", ("touch", "--", path))]
    if kind == "delete":
        return [Carried("argv", ("rm", "-rf", "--", *args.split()))] if args.split() else []
    return []
