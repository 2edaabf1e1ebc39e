"""The table-driven knowledge the fact builders use, read from the policy's data (`data.sandgate.config.toolcall`).

`Tables` says which programs sandgate models (`known`: nothing else is looked into for a command it carries),
and which programs run a command they carry on another machine or in a container (`executors`: `ssh HOST CMD`,
`docker exec C CMD`, `kubectl exec POD -- CMD`, `ansible HOSTS -m shell -a CMD`, `salt T cmd.run CMD`, ...).
A site extends both without code, in its copy of `sandgate/config/toolcall/data.json`:

- `wrappers`: programs (or "program subcommand") that run the command in their arguments locally (`sudo`,
  `timeout 5`, `uv run`), with their options (wrappers.py `_Spec`);
- `plain_programs`: programs sandgate should treat as plain (their arguments are never read as a command);
- `subcommand_words`: a first operand of an unknown program that is its own subcommand (`ruff format`,
  `mytool init`), not a program it runs: the words after it are still read;
- `executors`: per program (or "program subcommand ..."), how its arguments carry a command (see `Executor`);
- every command list of the policy (`read_commands`, `delete_commands`, `cli`, ...) counts as known too;
- `network_stdin_programs`, `dns_programs`, `sensitive_files`, `secret_variables`: what the secret-flow facts
  (secretflow.py) treat as network programs, DNS lookups, key files and secret variables beyond their classes.

`tables_of_policy(data)` builds them from a loaded policy's data, at each revision (memoised by identity: the
policy's data is not changed once loaded); `default_tables()` from the shipped policy directory. Pure apart
from reading the shipped data once.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

from gateway.toolcalls.interpreters import language_of
from gateway.toolcalls.sqlclients import CLIENTS
from gateway.toolcalls.wrappers import SHELLS, WrapperTable, default_wrappers

# Programs the fact builders model in code (beyond the policy's own lists): shells, wrappers, interpreters,
# SQL and HTTP clients, and the programs effects.py / programs.py / describe.py read options of.
MODELLED = frozenset({
    "git", "find", "xargs", "parallel", "make", "gmake", "npm", "pnpm", "yarn", "bun", "npx", "eval", "source", ".",
    "trap", "alias", "hash", "cd", "pushd", "popd", "at", "batch", "export", "declare", "typeset", "local", "readonly",
    "read", "mapfile", "readarray", "getopts", "echo", "printf", "cat", "tee", "base64", "ls", "touch", "mkdir",
    "truncate", "mkfifo", "mknod", "shred", "cp", "install", "ln", "scp", "rsync", "mv", "chmod", "chown", "chgrp",
    "dd", "sort", "shuf", "uniq", "curl", "wget", "http", "https", "xh", "xhs", "tar", "gtar", "bsdtar", "unzip",
    "zip", "7z", "7za", "7zz", "7zr", "docker", "podman", "nerdctl", "xxd", "ssh", "sftp", "mosh", "autossh",
    "rclone", "gh", "glab", "rg", "man", "less", "journalctl", "tmux", "screen", "fzf", "xdg-open", "git-lfs",
    "sudoedit", "exec", "command", "builtin", "true", "false", "test", "[", ":",
    "gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "zstd", "unzstd", "lz4", "lzma", "pigz", "pbzip2", "rar",
    "unrar",
})
_LISTS = ("read_commands", "delete_commands", "filesystem_commands", "system_commands", "network_commands",
          "deploy_commands", "deploy_operand_commands", "deploy_bare_commands", "plain_programs")
_MAPS = ("deploy_flags", "deploy_subcommands", "read_subcommands", "system_read_subcommands", "cli")
_PREFIXES = ("delete_command_prefixes", "filesystem_command_prefixes")


def _words(value: Any) -> frozenset[str]:
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, (list, tuple)):
        return frozenset(v for v in value if isinstance(v, str))
    return frozenset()


@dataclass(frozen=True)
class Executor:
    """How a program carries a command for another machine or a container (one entry of `executors`).

    `options`: its options that take a value; `targets`: how many operands name the host or container before
    the command (`ssh HOST`, `docker exec C`); `target_options`: options naming the hosts instead (`pssh -H`);
    `script_options`: options whose value is the command (`gcloud compute ssh --command`, `vagrant ssh -c`);
    `separator`: the command follows `--` (`kubectl exec POD -- CMD`); `join`: the command words are joined
    and read by a shell there (`ssh HOST rm -rf /`); `remote`: it runs on another host (ssh, ansible) rather
    than in a container on this one; `modules` (ansible `-m`, default `default_module`, arguments in
    `args_options`) and `functions` (salt `cmd.run`, the operand after the target): what each runs, one of
    "shell" (its arguments are a command line), "file" (ansible's file module: `path=... state=absent`) or
    "delete" (its operands are removed); `mount_options` (host directories the container sees: `-v SRC:DST`,
    `--mount type=bind,source=S,target=D`), `workdir_options` (`-w DIR`) and `entrypoint_options`
    (`--entrypoint PROG`) for container runners; `command_options` (the command's words follow it: `nix shell
    PKG -c CMD`); `here`: the command runs on this machine after all (`nix shell`), judged as it would be here."""
    name: str
    options: frozenset[str] = frozenset()
    targets: int = 0
    target_options: frozenset[str] = frozenset()
    script_options: frozenset[str] = frozenset()
    separator: bool = False
    join: bool = False
    remote: bool = True
    module_options: frozenset[str] = frozenset()
    args_options: frozenset[str] = frozenset()
    default_module: str = ""
    modules: Mapping[str, str] = field(default_factory=dict)
    functions: Mapping[str, str] = field(default_factory=dict)
    mount_options: frozenset[str] = frozenset()        # `-v SRC:DST`, `--mount type=bind,source=S,target=D`
    workdir_options: frozenset[str] = frozenset()      # `-w DIR`: where the command starts over there
    entrypoint_options: frozenset[str] = frozenset()   # `--entrypoint PROG`: the program its words are given to
    command_options: frozenset[str] = frozenset()      # `nix shell PKG -c CMD...`: the command follows the option
    here: bool = False                                 # the command runs on this machine, in this directory

    @classmethod
    def of(cls, name: str, spec: Mapping[str, Any]) -> "Executor":
        def kinds(key: str) -> dict[str, str]:
            value = spec.get(key)
            return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)} \
                if isinstance(value, Mapping) else {}

        targets = spec.get("targets", 0)
        return cls(name=name, options=_words(spec.get("options")),
                   targets=targets if isinstance(targets, int) and 0 <= targets <= 4 else 0,
                   target_options=_words(spec.get("target_options")),
                   script_options=_words(spec.get("script_options")), separator=spec.get("separator") is True,
                   join=spec.get("join") is True, remote=spec.get("remote") is not False,
                   module_options=_words(spec.get("module_options")), args_options=_words(spec.get("args_options")),
                   default_module=spec.get("default_module") if isinstance(spec.get("default_module"), str) else "",
                   modules=kinds("modules"), functions=kinds("functions"),
                   mount_options=_words(spec.get("mount_options")), workdir_options=_words(spec.get("workdir_options")),
                   entrypoint_options=_words(spec.get("entrypoint_options")),
                   command_options=_words(spec.get("command_options")), here=spec.get("here") is True)


@dataclass(frozen=True)
class Tables:
    known_names: frozenset[str]
    known_prefixes: tuple[str, ...] = ()
    executors: Mapping[tuple[str, ...], Executor] = field(default_factory=dict)
    depth: int = 1                      # the longest executor key, in words
    subcommand_words: frozenset[str] = frozenset()   # first operands of an unknown program that are its own
    # secrets flowing to the network (secretflow.py): programs whose input goes to the network, programs that
    # resolve their operands as DNS names, and what a site adds to the sensitive files and secret variables
    stream_programs: frozenset[str] | None = None     # None: secretflow's built-in lists
    dns_programs: frozenset[str] | None = None
    sensitive_files: tuple[str, ...] = ()             # globs ("/srv/keys/*", "~/.config/corp/token")
    secret_variables: tuple[str, ...] = ()            # name globs ("CORP_*", "VAULT_ADDR")
    wrappers: WrapperTable = field(default_factory=WrapperTable)
    executor_names: frozenset[str] = frozenset()      # the first word of every executor key (set from executors)

    def __post_init__(self) -> None:
        object.__setattr__(self, "executor_names", frozenset(k[0] for k in self.executors))
        object.__setattr__(self, "_known", {})         # names looked up already (bounded)
    cli_programs: frozenset[str] = frozenset()        # cloud, cluster and forge CLIs (`cli`): they send to APIs

    def known(self, name: str) -> bool:
        """Whether sandgate models the program `name` (a basename): its arguments are not read for a command."""
        if name in self.known_names:
            return True
        seen: dict[str, bool] = self._known           # type: ignore[attr-defined]
        hit = seen.get(name)
        if hit is None:
            hit = language_of(name) is not None or name.startswith(self.known_prefixes)
            if len(seen) >= 4096:
                seen.clear()
            seen[name] = hit
        return hit

    def executor(self, name: str, operands: list[str]) -> tuple[Executor, int] | None:
        """The executor entry for a command named `name` whose first operands are `operands`, and how many of
        those operands its key used (`docker exec`: 1)."""
        if name not in self.executor_names:
            return None
        for size in range(min(self.depth, len(operands) + 1), 0, -1):
            spec = self.executors.get((name, *operands[:size - 1]))
            if spec is not None:
                return spec, size - 1
        return None


def build_tables(config: Mapping[str, Any] | None) -> Tables:
    """Tables from a toolcall configuration (`data.sandgate.config.toolcall`); missing parts are empty."""
    cfg = config if isinstance(config, Mapping) else {}
    # a policy directory copied before the wrappers were data has none: the shipped ones apply
    wrappers = WrapperTable.of(cfg["wrappers"]) if "wrappers" in cfg else default_wrappers()
    names: set[str] = set(MODELLED) | set(SHELLS) | wrappers.names() | set(CLIENTS)
    for key in _LISTS:
        names |= _words(cfg.get(key))
    for key in _MAPS:
        value = cfg.get(key)
        if isinstance(value, Mapping):
            names |= {k for k in value if isinstance(k, str)}
    prefixes = tuple(sorted(p for key in _PREFIXES for p in _words(cfg.get(key)) if p))
    executors: dict[tuple[str, ...], Executor] = {}
    raw = cfg.get("executors")
    if isinstance(raw, Mapping):
        for key, spec in raw.items():
            if isinstance(key, str) and key.split() and isinstance(spec, Mapping):
                executors[tuple(key.split())] = Executor.of(key, spec)
    names |= {k[0] for k in executors}
    stream = cfg.get("network_stdin_programs")
    dns = cfg.get("dns_programs")
    return Tables(frozenset(names), prefixes, executors, max((len(k) for k in executors), default=1),
                  _words(cfg.get("subcommand_words")),
                  _words(stream) | _words(cfg.get("network_commands")) if stream is not None else None,
                  _words(dns) if dns is not None else None,
                  tuple(sorted(_words(cfg.get("sensitive_files")))), tuple(sorted(_words(cfg.get("secret_variables")))),
                  wrappers=wrappers,
                  cli_programs=frozenset(k for k in cfg.get("cli") or {} if isinstance(k, str))
                  if isinstance(cfg.get("cli"), Mapping) else frozenset())


_cache: dict[int, tuple[Any, Tables]] = {}
_lock = threading.Lock()


def tables_for(config: Mapping[str, Any] | None) -> Tables:
    """build_tables, memoised by the configuration object's identity (a loaded policy's data never changes)."""
    key = id(config)
    hit = _cache.get(key)
    if hit is not None and hit[0] is config:
        return hit[1]
    tables = build_tables(config)
    with _lock:
        if len(_cache) > 16:
            _cache.clear()
        _cache[key] = (config, tables)
    return tables


def tables_of_policy(data: Mapping[str, Any] | None) -> Tables:
    """The tables of a loaded policy's data (`data.sandgate.config.toolcall`); the shipped ones when the policy
    has none here (an OPA server that loads its own policy)."""
    config: Any = data
    for key in ("sandgate", "config", "toolcall"):
        config = config.get(key) if isinstance(config, Mapping) else None
    return tables_for(config) if isinstance(config, Mapping) else default_tables()


_default: list[Tables] = []


def shipped_config() -> dict:
    from gateway.policy.loader import default_policy_dir

    path = default_policy_dir() / "sandgate" / "config" / "toolcall" / "data.json"
    return json.loads(path.read_text(encoding="utf-8"))


def default_tables() -> Tables:
    """The tables of the shipped policy directory (read once)."""
    if not _default:
        _default.append(build_tables(shipped_config()))
    return _default[0]
