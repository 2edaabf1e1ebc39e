"""Command wrappers and multi-call binaries: what a command line really runs (`unwrap`).

Pure helpers on argv lists. `unwrap(["sudo", "-u", "x", "nice", "rm", "y"])` -> the argv that runs (`rm y`) plus
what the wrappers add: environment assignments (env, sudo, cross-env), a shell script run instead of argv
(`su -c`, `flock -c`, `watch`, `script -c`, `nix-shell --run`, `parallel`), operands read from stdin (xargs,
parallel), an interactive shell (`sudo -i`, `su`, `chroot DIR`), a working directory (`env -C`), files the
wrapper itself writes (`script FILE`, `strace -o`), a remote host (`parallel -S`, `systemd-run -H`).
`shell_script` finds a shell's `-c` script, `find_exec_groups` the commands `find -exec` runs.
"""
from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Callable

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


_T = {
    "sudo": _Spec(args="-u -g -h -p -C -D -r -t -T -U -R --user --group --host --prompt --close-from --chdir "
                       "--role --type --command-timeout --other-user --chroot", assignments=True, interactive=True,
                  chdir="-D --chdir", no_command="-l -v -V --list --validate --version --help"),
    "doas": _Spec(args="-u -C", interactive=True, no_command="-C"),
    "run0": _Spec(args="-u -g -D --user --group --chdir --setenv --unit --property --description --slice "
                       "--nice --machine", interactive=True, chdir="-D --chdir"),
    "pkexec": _Spec(args="--user", interactive=True),
    "env": _Spec(args="-u --unset -C --chdir -S --split-string -P --default-signal --ignore-signal "
                      "--block-signal", assignments=True, chdir="-C --chdir"),
    "cross-env": _Spec(assignments=True),
    "nice": _Spec(args="-n --adjustment"),
    "ionice": _Spec(args="-c -n --class --classdata", no_command="-p -P -u --pid --pgid --uid"),
    "nohup": _Spec(),
    "coproc": _Spec(),              # `coproc cmd args`: bash runs cmd in the background
    "setsid": _Spec(),
    "time": _Spec(args="-f -o --format --output", writes="-o --output"),
    "timeout": _Spec(args="-s -k --signal --kill-after", skip=1),
    "stdbuf": _Spec(args="-i -o -e --input --output --error"),
    "flock": _Spec(args="-w -E --timeout --wait --conflict-exit-code", skip=1, script="-c --command"),
    "chroot": _Spec(args="--userspec --groups", skip=1, interactive=True),
    "unshare": _Spec(args="--propagation --setgroups -S --setuid -G --setgid -R --root -w --wd --map-user "
                          "--map-group --map-users --map-groups --monotonic --boottime", interactive=True,
                     chdir="-w --wd"),
    "nsenter": _Spec(args="-t --target -S --setuid -G --setgid --env", interactive=True),
    "watch": _Spec(args="-n --interval -q --equexit", join=True),
    "script": _Spec(args="-E --echo -I --log-in -O --log-out -B --log-io -T --log-timing -m --logging-format",
                    script="-c --command", interactive=True, writes="-I --log-in -O --log-out -B --log-io"),
    "su": _Spec(args="-s --shell -g --group -G --supp-group -w --whitelist-environment", skip=1,
                script="-c --command -C --session-command", interactive=True),
    "runuser": _Spec(args="-u --user -s --shell -g --group -G --supp-group -w --whitelist-environment", skip=1,
                     script="-c --command -C --session-command", interactive=True),
    "sg": _Spec(script="-c", skip=1, join=True),
    "command": _Spec(no_command="-v -V"),
    "builtin": _Spec(),
    "exec": _Spec(args="-a"),
    "xargs": _Spec(args="-I -n -P -d -L -s -E -a --max-args --max-procs --delimiter --max-lines --max-chars "
                        "--eof --arg-file --process-slot-var", stdin_operands=True),
    "taskset": _Spec(skip=1, no_command="-p --pid"),
    "chrt": _Spec(args="-T -P -D --sched-runtime --sched-period --sched-deadline", skip=1,
                  no_command="-p --pid -m --max"),
    "numactl": _Spec(args="-C -N -m -i -p -P --physcpubind --cpunodebind --membind --interleave --preferred"),
    "prlimit": _Spec(args="-o --output", no_command="-p --pid"),
    "systemd-run": _Spec(args="-u --unit -p --property -E --setenv --uid --gid --nice --working-directory "
                              "--description --slice -M --machine -H --host --on-active --on-calendar "
                              "--timer-property --path-property --socket-property --service-type",
                         chdir="--working-directory", remote="-H --host"),
    "strace": _Spec(args="-o -e -p -s -u -E -a -b -I -O -P -S -X", writes="-o", no_command="-p"),
    "ltrace": _Spec(args="-o -e -p -s -u -a -n -A -D -F -l -x", writes="-o", no_command="-p"),
    "valgrind": _Spec(),
    "fakeroot": _Spec(args="-l --lib --faked -s -i -b"),
    "firejail": _Spec(),
    "proxychains": _Spec(args="-f"),
    "proxychains4": _Spec(args="-f"),
    "torsocks": _Spec(args="-u -p -a -P"),
    "caffeinate": _Spec(args="-t -w"),
    "unbuffer": _Spec(),
    "catchsegv": _Spec(),
    "eatmydata": _Spec(),
    "dbus-run-session": _Spec(),
    "xvfb-run": _Spec(args="-n -s -f -e -p --server-num --server-args --auth-file --error-file"),
    "busybox": _Spec(applet=True),
    "toybox": _Spec(applet=True),
    "coreutils": _Spec(applet=True),
    "bundle": _Spec(),
    "npx": _Spec(args="-p --package --call", script="-c --call"),
    "bunx": _Spec(),
    "uvx": _Spec(args="--from --with --with-requirements --with-editable --python -p --index --default-index "
                      "--index-url --extra-index-url -f --find-links"),
    "asdf": _Spec(),
    "direnv": _Spec(skip=1),
    "nix-shell": _Spec(args="-p -I --arg --argstr -A --attr", script="--run --command", interactive=True),
    "gdb": _Spec(),
}
# wrappers that are one subcommand of a bigger tool: (tool, subcommand) -> spec
_T2 = {
    ("uv", "run"): _Spec(args="--with --with-requirements --with-editable --python -p --project --directory "
                              "--package --extra --group --env-file --index --default-index -i --index-url "
                              "--extra-index-url -f --find-links", chdir="--directory"),
    ("uv", "tool"): _Spec(skip=1, args="--from --with --python -p"),
    ("poetry", "run"): _Spec(args="-C --directory -P --project", chdir="-C --directory"),
    ("pipenv", "run"): _Spec(),
    ("pdm", "run"): _Spec(args="-p --project"),
    ("hatch", "run"): _Spec(),
    ("rye", "run"): _Spec(),
    ("pixi", "run"): _Spec(args="-e --environment --manifest-path"),
    ("conda", "run"): _Spec(args="-n --name -p --prefix --cwd", chdir="--cwd"),
    ("mamba", "run"): _Spec(args="-n --name -p --prefix --cwd", chdir="--cwd"),
    ("micromamba", "run"): _Spec(args="-n --name -p --prefix --cwd", chdir="--cwd"),
    ("bundle", "exec"): _Spec(),
    ("npm", "exec"): _Spec(args="--package -p --call", script="-c --call"),
    ("npm", "x"): _Spec(args="--package -p --call", script="-c --call"),
    ("pnpm", "exec"): _Spec(),
    ("pnpm", "dlx"): _Spec(args="--package"),
    ("yarn", "exec"): _Spec(),
    ("yarn", "dlx"): _Spec(args="-p --package"),
    ("bun", "x"): _Spec(),
    ("nix", "develop"): _Spec(args="--profile -i"),
    ("mise", "exec"): _Spec(args="-C --cd", chdir="-C --cd"),
    ("mise", "x"): _Spec(args="-C --cd", chdir="-C --cd"),
    ("asdf", "exec"): _Spec(),
    ("direnv", "exec"): _Spec(skip=1),
}
_GDB_ARGS = "--args"
WRAPPER_NAMES = frozenset(_T) | frozenset(tool for tool, _sub in _T2)


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


def _spec_for(words: list[str]) -> tuple[_Spec | None, int, str]:
    if not words:
        return None, 0, ""
    name = posixpath.basename(words[0])
    if len(words) > 1 and (name, words[1]) in _T2:
        return _T2[(name, words[1])], 2, f"{name} {words[1]}"
    if name == "gdb" and _GDB_ARGS not in words:
        return None, 0, ""
    if name in ("bundle", "asdf", "direnv"):       # only their exec forms (above) wrap
        return None, 0, ""
    return _T.get(name), 1, name


def unwrap(argv: list[str], program_of: Callable[[str], str | None] | None = None) -> Unwrapped:
    """argv without leading wrappers and their options: `sudo -u x nice rm y` -> Unwrapped(["rm", "y"], ...).
    `program_of(word)` names the program a renamed one is (a link or copy made earlier), at every layer."""
    out = Unwrapped(list(argv))
    for _ in range(16):
        behind = program_of(out.argv[0]) if program_of is not None and out.argv else None
        if behind is not None:
            out.argv[0] = behind
        spec, start, name = _spec_for(out.argv)
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
        key, value, i = _option(word, words, i, takes | scripts)
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


def _option(word: str, words: list[str], i: int, takes: frozenset[str]) -> tuple[str, str | None, int]:
    """(option, its value or None, next index) for the option word at words[i]."""
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
        key, value, i = _option(argv[i], argv, i, takes)
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
