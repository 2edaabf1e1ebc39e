"""Interpreters on a command line: where their code comes from (`code_source`) and what it does (`analyze`).

`python -c CODE`, `perl -e`, `ruby -e`, `node -e/--eval/-p`, `php -r`, `deno eval`, `bun -e`, `lua -e`,
`Rscript -e`, `julia -e`, `osascript -e`, `awk PROGRAM`, `sed SCRIPT`, `vim -c`/`+cmd`, `emacs --eval`,
`gdb -ex`, `expect -c`, `pwsh -Command`: inline code. A script operand: a file it runs. No code and no script:
it reads its code from stdin. Pure; never raises.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from gateway.toolcalls.codefacts import CodeFacts
from gateway.toolcalls.pycode import analyze_python
from gateway.toolcalls.scriptscan import analyze_script


@dataclass
class CodeSource:
    language: str
    inline: str | None = None      # code given on the command line
    script: str | None = None      # the script file it runs
    stdin: bool = False            # reads its code from stdin
    in_place: bool = False         # edits its file operands (perl -i, sed -i, awk -i inplace)
    remote: bool = False           # runs code fetched from the network (deno run https://...)
    files: tuple[str, ...] = ()    # its file operands (edited in place with in_place)


_NAMES = [
    (re.compile(r"(?:python|pypy)(?:\d+(?:\.\d+)*)?[mtd]?"), "python"),
    (re.compile(r"node|nodejs|bun|deno|ts-node|tsx"), "js"),
    (re.compile(r"perl(?:\d+(?:\.\d+)*)?"), "perl"),
    (re.compile(r"ruby(?:\d+(?:\.\d+)*)?|jruby"), "ruby"),
    (re.compile(r"php(?:\d+(?:\.\d+)*)?(?:-cli)?"), "php"),
    (re.compile(r"lua(?:jit|\d+(?:\.\d+)*)?"), "lua"),
    (re.compile(r"Rscript|R"), "r"),
    (re.compile(r"julia"), "julia"),
    (re.compile(r"osascript"), "applescript"),
    (re.compile(r"[gmn]?awk|busybox-awk"), "awk"),
    (re.compile(r"g?sed"), "sed"),
    (re.compile(r"g?vim|vi|nvim|ex|view|vimdiff|rvim"), "vim"),
    (re.compile(r"emacs(?:client)?"), "elisp"),
    (re.compile(r"gdb"), "gdb"),
    (re.compile(r"tclsh[\d.]*|wish[\d.]*|expect"), "tcl"),
    (re.compile(r"pwsh|powershell(?:\.exe)?"), "pwsh"),
]
# per language: (options carrying inline code, options taking a separate argument, options naming a script file)
_OPTIONS = {
    "python": ("-c", "-m -W -X --check-hash-based-pycs", ""),
    "js": ("-e --eval -p --print", "-r --require --import --loader --experimental-loader --input-type -C "
           "--conditions --env-file --title", ""),
    "perl": ("-e -E", "-I -M -m", ""),
    "ruby": ("-e", "-I -r -C -E", ""),
    "php": ("-r -B -R -E", "-c -d -z -t", "-f"),
    "lua": ("-e", "-l", ""),
    "r": ("-e", "--file", "-f --file"),
    "julia": ("-e --eval -E --print", "-L --load -J --sysimage -p --procs --project -t --threads", ""),
    "applescript": ("-e", "-l -s", ""),
    "awk": ("-e --source", "-v -F -i -l -E --assign --field-separator --include --load", "-f --file"),
    "sed": ("-e --expression", "-l --line-length", "-f --file"),
    "vim": ("-c --cmd", "-u -U -i -w -W -T -t -q -r -d -s", "-S"),
    "elisp": ("--eval -eval", "-f --funcall -L --directory", "-l --load --script -script"),
    "gdb": ("-ex --eval-command -iex --init-eval-command", "-p --pid -cd --directory -d -s --symbols",
            "-x --command -ix --init-command"),
    "tcl": ("-c", "-f", ""),
    "pwsh": ("-c -command -Command", "-ExecutionPolicy -ep -WorkingDirectory -wd -ConfigurationName -Version -v",
             "-f -File -file"),
}
_INFO = frozenset({"--version", "-V", "--help", "-h", "-version", "-v", "-help", "--check", "-Version"})
_NOT_CODE_SUBCOMMANDS = {      # js runtimes' subcommands that do not run code of their own
    "bun": {"install", "add", "remove", "update", "pm", "init", "create", "build", "upgrade", "link", "unlink",
            "outdated", "publish", "patch", "audit", "info", "--version", "-v", "--help", "test"},
    "deno": {"fmt", "lint", "check", "info", "doc", "test", "bench", "compile", "install", "uninstall", "upgrade",
             "cache", "types", "completions", "lsp", "init", "add", "remove", "outdated", "publish", "serve",
             "--version", "-v", "--help", "task", "coverage", "vendor", "jupyter"},
}


def language_of(name: str) -> str | None:
    for pattern, language in _NAMES:
        if pattern.fullmatch(name):
            return language
    return None


def code_source(name: str, argv: list[str]) -> CodeSource | None:
    """Where the interpreter `name` (argv[0]'s basename) takes its code from, or None (not an interpreter, or a
    subcommand that runs no code of its own: `bun install`, `python -m pip` is code but not inline)."""
    language = language_of(name)
    if language is None:
        return None
    words = argv[1:]
    if name in _NOT_CODE_SUBCOMMANDS and words and words[0] in _NOT_CODE_SUBCOMMANDS[name]:
        return None
    if name == "deno":
        return _deno(words)
    if name == "bun" and words and words[0] == "run":
        words = words[1:]
        if words and not re.search(r"\.[cm]?[jt]sx?$", words[0]):
            return None                         # `bun run build`: a package.json script
    if name in ("tsx", "ts-node") and words[:1] == ["watch"]:
        words = words[1:]
    if language == "pwsh":
        return _pwsh(words)
    return _generic(language, words)


def _generic(language: str, words: list[str]) -> CodeSource | None:
    inline_opts, arg_opts, file_opts = (frozenset(s.split()) for s in _OPTIONS[language])
    source = CodeSource(language)
    codes: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            i += 1
            break
        if language == "vim" and word.startswith("+") and len(word) > 1:
            codes.append(word[1:])
            i += 1
            continue
        if not word.startswith("-") or word == "-":
            break
        key, eq, value = word.partition("=")
        if eq and key in inline_opts | arg_opts | file_opts:
            i += 1
        elif key in inline_opts | arg_opts | file_opts:
            value = words[i + 1] if i + 1 < len(words) else ""
            i += 2
        elif not word.startswith("--") and len(word) > 2 and language in ("python", "perl", "ruby", "lua",
                                                                          "julia", "php", "sed"):
            key, value, i = _cluster(word, words, i, inline_opts | arg_opts | file_opts, language, source)
            if key is None:
                continue
        else:
            if word in _INFO and language not in ("awk", "sed", "vim") and not codes:
                return None                    # --version, --help: no code runs
            if (language == "sed" and word in ("-i", "--in-place")) or word.startswith("--in-place"):
                source.in_place = True
            if language == "perl" and word.startswith("-i") or language == "ruby" and word.startswith("-i"):
                source.in_place = True
            i += 1
            continue
        if key in inline_opts:
            codes.append(value)
            if language == "python":           # -c ends python's options: the rest is sys.argv
                return _done(source, codes, None)
        elif key in file_opts:
            source.script = value
        elif language == "awk" and key in ("-i", "--include") and value == "inplace":
            source.in_place = True
        elif language == "python" and key == "-m":
            return source                      # a module: runs installed code, nothing inline
        elif language == "applescript" and key == "-l" and value.lower().startswith("javascript"):
            source.language = "jxa"
    rest = words[i:]
    if codes or source.script is not None:
        source.files = tuple(rest)
        return _done(source, codes, None)
    if language in ("awk", "sed") and rest:
        source.files = tuple(rest[1:])
        return _done(source, [rest[0]], None)
    if language in ("vim", "elisp", "gdb"):
        source.files = tuple(rest)
        return source                          # editing files / a debugger: no code of its own
    if rest and rest[0] != "-":
        source.script = rest[0]
        return source
    source.stdin = True
    return source


def _cluster(word: str, words: list[str], i: int, takes: frozenset[str], language: str,
             source: CodeSource) -> tuple[str | None, str, int]:
    """A short-option cluster (`-Sc`, `-lne`, `-pi.bak`): the first option that takes an argument, with it."""
    for pos in range(1, len(word)):
        short = "-" + word[pos]
        if short == "-i" and language in ("perl", "ruby", "sed"):
            source.in_place = True
            if language == "sed" or language in ("perl", "ruby"):
                return None, "", i + 1           # -i[SUFFIX]: the rest of the cluster is the suffix
        if short in takes:
            if pos + 1 < len(word):
                return short, word[pos + 1:], i + 1
            return short, words[i + 1] if i + 1 < len(words) else "", i + 2
    return None, "", i + 1


def _done(source: CodeSource, codes: list[str], script: str | None) -> CodeSource:
    if codes:
        source.inline = "\n".join(codes)
    if script is not None:
        source.script = script
    return source


def _deno(words: list[str]) -> CodeSource | None:
    if words and words[0] == "eval":
        code = [w for w in words[1:] if not w.startswith("-")]
        return CodeSource("js", inline=code[0] if code else "")
    if words and words[0] in ("run", "repl") or (words and not words[0].startswith("-") and
                                                  re.search(r"\.[cm]?[jt]sx?$", words[0])):
        rest = [w for w in (words[1:] if words[0] in ("run", "repl") else words) if not w.startswith("-")]
        if not rest:
            return CodeSource("js", stdin=True)
        return CodeSource("js", script=rest[0], remote=bool(re.match(r"(?:https?|npm|jsr):", rest[0])))
    return None


def _pwsh(words: list[str]) -> CodeSource:
    lower = [w.lower() for w in words]
    for i, word in enumerate(lower):
        if word in ("-encodedcommand", "-enc", "-ec", "-e", "-en", "-encoded"):
            return CodeSource("pwsh", inline="-EncodedCommand " + " ".join(words[i + 1:]))
        if word in ("-command", "-c", "-com", "-comm"):
            rest = words[i + 1:]
            return CodeSource("pwsh", stdin=rest[:1] == ["-"], inline=None if rest[:1] == ["-"] else " ".join(rest))
        if word in ("-file", "-f"):
            return CodeSource("pwsh", script=words[i + 1] if i + 1 < len(words) else "")
    rest = [w for w in words if not w.startswith("-")]
    if rest:
        return CodeSource("pwsh", inline=" ".join(rest))
    return CodeSource("pwsh", stdin=True)


def analyze(language: str, code: str) -> CodeFacts:
    """CodeFacts of code in language."""
    if language == "python":
        return analyze_python(code)
    if language == "gdb":
        return _gdb(code)
    return analyze_script(language, code)


def _gdb(commands: str) -> CodeFacts:
    facts = CodeFacts("gdb")
    for line in commands.splitlines():
        line = line.strip()
        shell = re.match(r"^(?:shell|!)\s*(.*)$", line)
        python = re.match(r"^(?:python|pi|python-interactive)\s+(.*)$", line)
        if shell:
            facts.spawns.append(shell.group(1) or None)
        elif python:
            inner = analyze_python(python.group(1))
            for key in ("deletes", "writes", "moves", "links", "spawns", "http"):
                getattr(facts, key).extend(getattr(inner, key))
            facts.opaque = facts.opaque or inner.opaque or not inner.parsed
        elif re.match(r"^(?:source|eval)\b", line):
            facts.opaque = True
    return facts


def language_of_script(path: str, content: str | None, default: str) -> str:
    """The language of a script file: its shebang, else its extension, else `default`."""
    if content:
        first = content.split("\n", 1)[0]
        if first.startswith("#!"):
            words = first[2:].split()
            if words and words[0].endswith("/env") and len(words) > 1:
                words = [w for w in words[1:] if not w.startswith("-")]
            program = words[0].rsplit("/", 1)[-1] if words else ""
            return "shell" if re.fullmatch(r"(?:ba|z|da|k|a|mk)?sh", program) else (language_of(program) or "shell")
    extension = path.rsplit(".", 1)[-1] if "." in path.rsplit("/", 1)[-1] else ""
    return {"py": "python", "js": "js", "mjs": "js", "cjs": "js", "ts": "js", "pl": "perl", "rb": "ruby",
            "php": "php", "lua": "lua", "r": "r", "R": "r", "jl": "julia", "sh": "shell", "bash": "shell",
            "zsh": "shell", "awk": "awk", "sed": "sed", "tcl": "tcl", "ps1": "pwsh",
            "applescript": "applescript", "scpt": "applescript"}.get(extension, default)
