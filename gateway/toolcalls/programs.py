"""Programs a command starts through its configuration, environment or options (`programs_run`).

A read is not a read when it runs a program: `git -c core.pager=CMD log`, `GIT_CONFIG_*` / `--config-env`,
`!` aliases, `diff.external`, `filter.*`; `PAGER` / `LESSOPEN` / `EDITOR` and friends in the environment;
`rg --pre CMD`, `man -P CMD`, `sort --compress-program`, `tar --to-command` / `-I`, `rsync -e`,
`ssh -o ProxyCommand`, `zip -TT`, `fzf --preview`, tmux/screen commands. Each is `(via, shell text or None)`:
None when what runs is not visible (a hook directory, a preloaded library, a config file).
Pure; never raises.
"""
from __future__ import annotations

import re
import shlex

Program = tuple[str, str | None]

# environment variables whose value is a command line run by the program (or by any program)
_ENV_COMMANDS = ("PAGER", "MANPAGER", "GIT_PAGER", "LESSOPEN", "LESSCLOSE", "EDITOR", "VISUAL", "SUDO_EDITOR",
                 "GIT_EDITOR", "GIT_SEQUENCE_EDITOR", "BROWSER", "SYSTEMD_PAGER", "PSQL_PAGER", "PROMPT_COMMAND",
                 "GIT_SSH_COMMAND", "GIT_SSH", "GIT_EXTERNAL_DIFF", "GIT_ASKPASS", "SSH_ASKPASS",
                 "GIT_PROXY_COMMAND", "BASH_ENV", "ENV", "MYSQL_PAGER", "AWS_PAGER", "GH_PAGER", "GLAB_PAGER",
                 "DIFF_VIEWER", "FCEDIT", "KUBE_EDITOR", "GH_EDITOR", "TERMINAL")
# environment variables that load code nobody sees on the command line
_ENV_HIDDEN = ("LD_PRELOAD", "LD_AUDIT", "DYLD_INSERT_LIBRARIES", "PYTHONSTARTUP", "PERL5DB", "GIT_EXEC_PATH",
               "GIT_TEMPLATE_DIR", "GIT_CONFIG", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "BASH_ENV_FILE",
               "ZDOTDIR", "PYTHONINSPECT", "NODE_PATH_HOOK")
_ENV_OPTIONS = {"NODE_OPTIONS": r"(?:^|\s)(?:-r|--require|--import|--loader|--experimental-loader)\b",
                "PERL5OPT": r"-[MmdI]", "RUBYOPT": r"-r", "JAVA_TOOL_OPTIONS": r"-javaagent|-agentpath",
                "_JAVA_OPTIONS": r"-javaagent|-agentpath", "PYTHONWARNINGS": r"::\w+\.\w"}
_GIT_EXEC_KEYS = re.compile(
    r"core\.(?:fsmonitor|pager|editor|sshcommand|askpass|gitproxy|hookspath)|pager\..+|sequence\.editor|"
    r"diff\.external|diff\..+\.(?:textconv|command)|difftool\..+\.cmd|mergetool\..+\.cmd|merge\..+\.driver|"
    r"filter\..+\.(?:clean|smudge|process)|credential\.helper|credential\..+\.helper|gpg\.program|"
    r"gpg\..+\.program|uploadpack\.packobjectshook|remote\..+\.(?:uploadpack|receivepack|vcs)|web\.browser|"
    r"browser\..+\.(?:cmd|path)|man\..+\.(?:cmd|path)|interactive\.difffilter|include\.path|includeif\..+\.path|"
    r"init\.templatedir|protocol\.ext\.allow|protocol\.allow|sendemail\.(?:sendmailcmd|smtpserver)|"
    r"core\.alternaterefscommand|submodule\..+\.update|alias\..+|trailer\..+\.command|trailer\..+\.cmd")
_GIT_BOOLEANS = {"true", "false", "0", "1", "yes", "no", "on", "off", ""}
_GIT_HELPERS = {"store", "cache", "osxkeychain", "manager", "manager-core", "libsecret", "wincred", "oauth",
                "netrc", ""}
_GIT_FILE_KEYS = re.compile(r"core\.hookspath|include\.path|includeif\..+\.path|init\.templatedir|gpg\.program|"
                            r"protocol\.ext\.allow|protocol\.allow|.+\.path")
_GIT_SUB_OPTIONS = {"rebase": ("-x", "--exec"), "difftool": ("-x", "--extcmd"), "clone": ("-u", "--upload-pack"),
                    "fetch": ("--upload-pack",), "pull": ("--upload-pack",), "ls-remote": ("--upload-pack",),
                    "push": ("--receive-pack", "--exec"), "archive": ("--exec",),
                    "send-email": ("--sendmail-cmd", "--smtp-server"), "grep": ("-O", "--open-files-in-pager"),
                    "filter-branch": ("--tree-filter", "--index-filter", "--msg-filter", "--env-filter",
                                      "--commit-filter", "--parent-filter", "--tag-name-filter"),
                    "mergetool": ("--tool", "-t"), "commit": ("--cleanup-hook",)}
_OPTION_PROGRAMS = {
    "rg": ("--pre",), "man": ("-P", "--pager", "-H", "--html"), "sort": ("--compress-program",),
    "tar": ("--to-command", "-I", "--use-compress-program", "-F", "--info-script", "--new-volume-script",
            "--rsh-command"),
    "zip": ("-TT", "--unzip-command"), "rsync": ("-e", "--rsh", "--rsync-path"), "fzf": ("--preview",),
    "scp": ("-S",), "sftp": ("-S", "-D"), "less": (), "journalctl": (), "wget": ("--use-askpass",),
    "ssh": (), "mysql": ("--pager",), "xdg-open": (), "git-lfs": (),
}
_SSH_OPTIONS = re.compile(r"(?i)^(ProxyCommand|LocalCommand|KnownHostsCommand|RemoteCommand|PKCS11Provider|"
                          r"SecurityKeyProvider)\s*[= ]\s*(.*)$")


def programs_run(name: str, argv: list[str], env: dict[str, str], git_sub: str = "") -> list[Program]:
    """(via, shell text or None) for each program `argv` (named `name`) starts besides itself."""
    out = env_programs(env)
    if name == "git":
        out += _git(argv, env, git_sub)
    elif name in ("ssh", "scp", "sftp", "rsync"):
        out += _ssh_options(argv)
    if name in _OPTION_PROGRAMS:
        out += _options(name, argv)
    if name == "tar":
        for word in argv[1:]:
            match = re.match(r"--checkpoint-action=exec=(.*)$", word)
            if match:
                out.append(("tar --checkpoint-action", match.group(1)))
    if name in ("tmux", "screen"):
        out += _multiplexer(name, argv)
    return out


def env_programs(env: dict[str, str]) -> list[Program]:
    out: list[Program] = []
    for key, value in env.items():
        if key in _ENV_COMMANDS and value.strip():
            text = value.lstrip("|-").replace("%s", "FILE").strip() if key in ("LESSOPEN", "LESSCLOSE") else value
            out.append((f"${key}", text or None))
        elif key in _ENV_HIDDEN and value.strip() and value.strip() != "/dev/null":
            out.append((f"${key}", None))
        elif key in _ENV_OPTIONS and re.search(_ENV_OPTIONS[key], value):
            out.append((f"${key}", None))
        elif key.startswith("BASH_FUNC_") and value.lstrip().startswith("()"):
            body = value.lstrip()[2:].strip()
            out.append((f"${key}", body[1:-1] if body.startswith("{") and body.endswith("}") else None))
    return out


def git_config(argv: list[str], env: dict[str, str]) -> list[tuple[str, str | None]]:
    """(key, value or None) of every configuration given on the command line or in the environment."""
    pairs: list[tuple[str, str | None]] = []
    words = argv[1:]
    for i, word in enumerate(words):
        if word in ("-c", "--config") and i + 1 < len(words):
            pairs.append(_pair(words[i + 1]))
        elif word.startswith(("-c", "--config=")) and word not in ("-c", "--config") and "=" in word:
            pairs.append(_pair(word[len("--config="):] if word.startswith("--config=") else word[2:]))
        elif word.startswith("--config-env="):
            key = word[len("--config-env="):].partition("=")[0]
            pairs.append((key.lower(), None))       # the environment's value when it runs: not visible here
    count = env.get("GIT_CONFIG_COUNT", "")
    if count.isascii() and count.isdigit():     # "²".isdigit() is True, int("²") raises
        for n in range(min(int(count), 64)):
            key = env.get(f"GIT_CONFIG_KEY_{n}")
            if key is not None:
                pairs.append((key.lower(), env.get(f"GIT_CONFIG_VALUE_{n}")))
    if "GIT_CONFIG_PARAMETERS" in env:
        for match in re.finditer(r"'([^']*)'(?:=('[^']*'|\S*))?", env["GIT_CONFIG_PARAMETERS"]):
            pairs.append(_pair(match.group(1) + ("=" + match.group(2).strip("'") if match.group(2) else "")))
        if not re.search(r"'", env["GIT_CONFIG_PARAMETERS"]):
            pairs.append(("git_config_parameters", None))
    return pairs


def _pair(text: str) -> tuple[str, str | None]:
    key, eq, value = text.partition("=")
    return key.lower(), value if eq else "true"


# `git config` options that take a value (their value is not the key or the value being set)
_GIT_CONFIG_VALUED = ("-f", "--file", "--blob", "--type", "--default", "--comment", "--value")


def git_config_set(argv: list[str], sub: str) -> list[tuple[str, str | None]]:
    """(key, value) that `git config [--global|--local|-f F ...] [set|--add|--replace-all] KEY VALUE` writes:
    a command stored for git to run later (core.pager, alias.x = !cmd, ...) is judged like `git -c`."""
    if sub != "config":
        return []
    words = argv[argv.index("config") + 1:] if "config" in argv else []
    positional: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word in _GIT_CONFIG_VALUED:
            i += 2
            continue
        if word.startswith("-"):
            if word in ("--get", "--get-all", "--get-regexp", "--get-urlmatch", "--unset", "--unset-all", "-l",
                        "--list", "--remove-section", "--rename-section", "-e", "--edit"):
                return []                       # reads, removals and the editor (EDITOR is judged elsewhere)
            i += 1
            continue
        positional.append(word)
        i += 1
    if positional[:1] in (["get"], ["list"], ["unset"], ["remove-section"], ["rename-section"], ["edit"]):
        return []
    if positional[:1] == ["set"]:
        positional = positional[1:]
    if len(positional) < 2:
        return []
    return [(positional[0].lower(), positional[1])]


def _git(argv: list[str], env: dict[str, str], sub: str) -> list[Program]:
    out: list[Program] = []
    stored = git_config_set(argv, sub)
    for key, value in git_config(argv, env) + stored:
        if not _GIT_EXEC_KEYS.fullmatch(key):
            continue
        if value is not None and (key == "core.fsmonitor" and value.strip().lower() in _GIT_BOOLEANS or
                                  key.startswith("credential.") and value.strip() in _GIT_HELPERS or
                                  key.startswith("submodule.") and not value.startswith("!")):
            continue
        via = f"git config {key}"
        if key.startswith("alias."):
            if (key[len("alias."):] != sub and (key, value) not in stored) or value is None:
                continue
            out.append((via, value[1:] if value.startswith("!") else "git " + value))
        elif value is None or _GIT_FILE_KEYS.fullmatch(key) or key.startswith("protocol."):
            out.append((via, None))
        else:
            out.append((via, value[1:] if value.startswith("!") else value))
    words = argv[1:]
    for option in _GIT_SUB_OPTIONS.get(sub, ()):
        for i, word in enumerate(words):
            if word == option and i + 1 < len(words):
                out.append((f"git {sub} {option}", words[i + 1]))
            elif word.startswith(option + "=") and option.startswith("--"):
                out.append((f"git {sub} {option}", word.split("=", 1)[1]))
            elif word == "--open-files-in-pager" or (word == "-O" and option == "-O"):
                continue
    if sub == "bisect" and "run" in words:
        out.append(("git bisect run", shlex.join(words[words.index("run") + 1:]) or None))
    if sub == "submodule" and "foreach" in words:
        rest = [w for w in words[words.index("foreach") + 1:] if w not in ("--recursive", "-q", "--quiet")]
        out.append(("git submodule foreach", " ".join(rest) or None))
    if sub in ("clone", "init") and any(w == "--template" or w.startswith("--template=") for w in words):
        out.append((f"git {sub} --template", None))           # hooks copied from a template directory
    for word in words:
        if word.startswith("ext::"):
            out.append(("git ext:: transport", word[5:].replace("% ", " ").replace("%%", "%") or None))
    return out


def git_stored_programs(pairs: list[tuple[str, str]], sub: str) -> list[Program]:
    """What a git configuration file the session wrote makes `git SUB` run: (via, shell text or None)."""
    out: list[Program] = []
    for key, value in pairs:
        if not _GIT_EXEC_KEYS.fullmatch(key):
            continue
        if key == "core.fsmonitor" and value.strip().lower() in _GIT_BOOLEANS or \
                key.startswith("credential.") and value.strip() in _GIT_HELPERS or \
                key.startswith("submodule.") and not value.startswith("!"):
            continue
        via = f"git config file {key}"
        if key.startswith("alias."):
            if key[len("alias."):] == sub:
                out.append((via, value[1:] if value.startswith("!") else "git " + value))
        elif _GIT_FILE_KEYS.fullmatch(key) or key.startswith("protocol."):
            out.append((via, None))
        else:
            out.append((via, value[1:] if value.startswith("!") else value))
    return out[:16]


def _options(name: str, argv: list[str]) -> list[Program]:
    out: list[Program] = []
    words = argv[1:]
    options = _OPTION_PROGRAMS[name]
    for i, word in enumerate(words):
        if word == "--":
            break
        for option in options:
            if word == option and i + 1 < len(words):
                out.append((f"{name} {option}", words[i + 1]))
            elif word.startswith(option + "=") and option.startswith("--"):
                out.append((f"{name} {option}", word.split("=", 1)[1]))
            elif len(option) == 2 and word.startswith(option) and len(word) > 2 and not word.startswith("--"):
                out.append((f"{name} {option}", word[2:]))
    return out


def _ssh_options(argv: list[str]) -> list[Program]:
    out: list[Program] = []
    words = argv[1:]
    for i, word in enumerate(words):
        value = words[i + 1] if word == "-o" and i + 1 < len(words) else (word[2:] if word.startswith("-o") else "")
        match = _SSH_OPTIONS.match(value)
        if match and match.group(2).strip().lower() != "none":
            out.append((f"ssh -o {match.group(1)}", match.group(2)))
        if word == "-F" and i + 1 < len(words) and words[i + 1] != "/dev/null":
            out.append(("ssh -F config", None))
    return out


def _multiplexer(name: str, argv: list[str]) -> list[Program]:
    words = argv[1:]
    if name == "screen":
        i, detached = 0, False
        while i < len(words) and words[i].startswith("-"):
            word = words[i]
            detached = detached or word.startswith("-d") or word == "-X"
            i += 2 if word in ("-S", "-c", "-e", "-h", "-p", "-t", "-T", "-X", "-Logfile") or (
                len(word) > 2 and word[-1] in "Sc") else 1
        rest = words[i:]
        return [("screen", shlex.join(rest))] if detached and rest else []
    runs = {"new-session", "new", "new-window", "neww", "split-window", "splitw", "run-shell", "run",
            "respawn-pane", "respawnp", "respawn-window", "respawnw", "send-keys", "send", "display-popup",
            "popup", "pipe-pane", "pipep", "if-shell", "if"}
    takes = {"-t", "-s", "-n", "-c", "-x", "-y", "-F", "-e", "-f", "-w", "-h", "-l", "-d"}
    out: list[Program] = []
    for i, word in enumerate(words):
        if word in runs:
            rest, j = [], i + 1
            while j < len(words) and words[j] != ";":
                if words[j] in takes and not words[j] == "-d":
                    j += 2
                    continue
                if not words[j].startswith("-"):
                    rest.append(words[j])
                j += 1
            if word in ("send-keys", "send"):
                rest = [r for r in rest if r not in ("Enter", "C-m", "KPEnter")]
            if rest:
                out.append((f"tmux {word}", " ".join(rest)))
    return out
