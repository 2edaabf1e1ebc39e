"""Tools that run files without naming them: which files a command runs implicitly, and what their content runs.

`wanted(name, argv, operands, values, env)` lists the files a command reads as code: test runners (pytest and
`conftest.py`/`test_*.py`, `python -m unittest`), interpreters importing from the workspace (`python -m mod`,
`sitecustomize.py`/`usercustomize.py`/`.pth`), installers and build frontends (`pip install .` and `setup.py`,
an in-tree build backend), build tools (`cargo` and `build.rs`/sources, `go generate` and `//go:generate`,
`go run|test` and Go sources, make/just/task/rake/nox/tox/gradle/mvn and their files), hook runners
(`pre-commit` and its local hooks, `direnv` and `.envrc`), git reading a configuration file, JavaScript test
runners and their configs (jest, vitest, mocha, `node|deno|bun test`), rspec and bundler (`Gemfile`), phpunit,
composer scripts, CMake, Terraform (`local-exec`, `external`), MSBuild `<Exec>` and Vagrant provisioners. Each want is
a `Want(pattern, language, via, where)`: `where` is "here" (the pattern relative to the project directory),
"below" (a file name glob at any depth under it), "up" (the directory and its parents), "site" (it, PYTHONPATH
and the workspace) or "home" (a path under the home directory).

The `*_programs(text)` readers turn such a file's content into what it runs: shell text (recipes, hook entries,
tox commands, `//go:generate` lines, git config programs) or CodeFacts for code sandgate reads by scanning (Rust,
Go, Gradle, Maven). Only files the session wrote itself count (describe.py decides that); a file it did not
write (a clone, an extracted archive) is ordinary work. Pure; never raises.
"""
from __future__ import annotations

import json
import posixpath
import re
import shlex
from dataclasses import dataclass

from gateway.toolcalls.codefacts import CodeFacts

MAX_TEXT = 200_000


@dataclass(frozen=True)
class Want:
    pattern: str        # a relative path ("setup.py", ".cargo/config.toml") or a name glob ("test_*.py")
    language: str       # how its content is read (see describe._Command.implicit)
    via: str            # for the facts: "pytest conftest.py"
    where: str = "here"  # "here" | "below" | "up"


_PYTHON = re.compile(r"(?:python|pypy)(?:\d+(?:\.\d+)*)?[mtd]?")
_PYTEST = (Want("conftest.py", "python", "pytest conftest.py", "below"),
           Want("conftest.py", "python", "pytest conftest.py", "up"),
           Want("test_*.py", "python", "pytest test file", "below"),
           Want("*_test.py", "python", "pytest test file", "below"))
_SITE = (Want("sitecustomize.py", "python", "python sitecustomize", "site"),
         Want("usercustomize.py", "python", "python usercustomize", "site"),
         Want("*.pth", "pth", "python .pth file", "site"))
_BUILD_PY = (Want("setup.py", "python", "build setup.py"), Want("pyproject.toml", "pyproject", "build backend"),
             Want("hatch_build.py", "python", "build hatch_build.py"))
_PIP_BUILDS = frozenset({"install", "wheel", "download", "lock"})
_CARGO_RUNS = frozenset({"build", "b", "run", "r", "test", "t", "check", "c", "bench", "install", "clippy", "doc",
                         "d", "publish", "package", "fix", "miri", "nextest", "tarpaulin", "llvm-cov"})
_CARGO_EXECUTES = frozenset({"run", "r", "test", "t", "bench", "nextest", "tarpaulin", "llvm-cov", "miri"})
_GO_EXECUTES = frozenset({"run", "test"})
_PRE_COMMIT_READS = frozenset({"--version", "-V", "--help", "-h", "help", "validate-config", "validate-manifest",
                               "sample-config", "clean", "gc", "uninstall"})
_DIRENV_READS = frozenset({"status", "version", "deny", "revoke", "help", "--help", "--version", "hook", "stdlib",
                           "prune", "fetchurl"})
_MAKEFILES = ("GNUmakefile", "makefile", "Makefile")
_JS_RUNNERS = frozenset({"jest", "vitest", "mocha", "ava", "tap", "jasmine", "karma", "playwright", "cypress", "tsx",
                         "c8", "nyc"})
_JS_TESTS = ("*.test.js", "*.spec.js", "*.test.ts", "*.spec.ts", "*.test.mjs", "*.test.cjs", "*.test.jsx", "*.test.tsx",
             "*.spec.jsx", "*.spec.tsx", "*_test.ts", "*_test.js")
_JS_CONFIGS = ("jest.config.js", "jest.config.ts", "jest.config.mjs", "jest.setup.js", "vitest.config.ts",
               "vitest.config.js", "vite.config.ts", "vite.config.js", ".mocharc.js", ".mocharc.cjs", "babel.config.js",
               ".babelrc.js", "playwright.config.ts", "cypress.config.js", "cypress.config.ts")
_MODULE_TOOLS = {"pytest": "pytest", "py.test": "pytest", "unittest": "unittest", "pip": "pip", "build": "build",
                 "tox": "tox", "nox": "nox", "pre_commit": "pre-commit"}


def python_module(argv: list[str]) -> tuple[str, list[str]] | None:
    """`python [opts] -m MOD ARGS` -> (MOD, [MOD, *ARGS]); None when it does not run a module."""
    for i, word in enumerate(argv[1:], 1):
        if word == "-m" and i + 1 < len(argv):
            return argv[i + 1], [argv[i + 1]] + argv[i + 2:]
        if word.startswith("-m") and len(word) > 2 and not word.startswith("--"):
            return word[2:], [word[2:]] + argv[i + 1:]
        if word in ("-c", "-") or not word.startswith("-"):
            return None
        if word in ("-W", "-X", "-Q"):
            continue
    return None


def is_python(name: str) -> bool:
    return bool(_PYTHON.fullmatch(name))


def wanted(name: str, argv: list[str], operands: list[str], values: dict[str, list[str]],
           flags: list[str]) -> list[Want]:
    """The files the command `argv` (named `name`) runs without naming them."""
    wants: list[Want] = []
    sub = operands[0] if operands else ""
    if is_python(name):
        wants += _SITE
        module = python_module(argv)
        if module is not None:
            mod, rest = module
            wants += [Want(mod.replace(".", "/") + ".py", "python", f"python -m {mod}"),
                      Want(mod.replace(".", "/") + "/__init__.py", "python", f"python -m {mod}"),
                      Want(mod.replace(".", "/") + "/__main__.py", "python", f"python -m {mod}")]
            tool = _MODULE_TOOLS.get(mod)
            if tool is not None:
                wants += wanted(tool, rest, [w for w in rest[1:] if not w.startswith("-")], {},
                                [w for w in rest[1:] if w.startswith("-")])
    elif name in ("pytest", "py.test"):
        wants += _PYTEST + _SITE
        for plugin in values.get("-p", []):
            if not plugin.startswith("no:"):
                wants.append(Want(plugin.replace(".", "/") + ".py", "python", f"pytest plugin {plugin}"))
    elif name == "unittest":
        wants += (Want("test*.py", "python", "unittest test file", "below"),)
    elif name in ("pip", "pip3") or (name == "uv" and sub == "pip") or name in ("setuptools",):
        sub = operands[1] if name == "uv" and len(operands) > 1 else sub
        if sub in _PIP_BUILDS:
            wants += _BUILD_PY
    elif name == "build" or (name in ("uv", "poetry", "pdm", "hatch", "flit", "rye") and sub in (
            "build", "install", "sync", "publish", "lock")):
        wants += _BUILD_PY
    elif name == "cargo" and sub in _CARGO_RUNS:
        wants += (Want("build.rs", "rust", "cargo build.rs", "below"),
                  Want(".cargo/config.toml", "cargo-config", "cargo config", "up"),
                  Want(".cargo/config", "cargo-config", "cargo config", "up"))
        if sub in _CARGO_EXECUTES:
            wants.append(Want("*.rs", "rust", f"cargo {sub}", "below"))
    elif name == "go" and sub == "generate":
        wants.append(Want("*.go", "go-generate", "go generate", "below"))
    elif name == "go" and sub in _GO_EXECUTES:
        wants.append(Want("*.go", "go", f"go {sub}", "below"))
    elif name in ("make", "gmake") and not values.get("-f") and not values.get("--file"):
        wants += [Want(m, "make", f"make {m}") for m in _MAKEFILES if m != "Makefile"]
    elif name == "just":
        wants += [Want(j, "just", f"just {j}", "up") for j in ("justfile", "Justfile", ".justfile")]
    elif name in ("task", "go-task"):
        wants += [Want(t, "task", f"task {t}", "up") for t in ("Taskfile.yml", "Taskfile.yaml", "taskfile.yml",
                                                               "taskfile.yaml", "Taskfile.dist.yml")]
    elif name == "rake":
        wants += [Want(r, "rake", f"rake {r}", "up") for r in ("Rakefile", "rakefile", "Rakefile.rb", "rakefile.rb")]
        wants.append(Want("rakelib/*.rake", "rake", "rake rakelib"))
    elif name == "nox":
        wants.append(Want("noxfile.py", "nox", "nox noxfile.py"))
    elif name == "tox":
        wants += (Want("tox.ini", "tox", "tox tox.ini"), Want("setup.cfg", "tox", "tox setup.cfg"),
                  Want("pyproject.toml", "tox", "tox pyproject.toml")) + _BUILD_PY
    elif name in ("gradle", "gradlew"):
        wants += [Want(g, "gradle", f"gradle {g}", "below") for g in ("build.gradle", "build.gradle.kts",
                                                                       "settings.gradle", "settings.gradle.kts",
                                                                       "init.gradle", "*.gradle", "*.gradle.kts")]
    elif name in ("mvn", "mvnw", "maven"):
        wants += (Want("pom.xml", "maven", "mvn pom.xml", "below"), Want(".mvn/extensions.xml", "maven", "mvn extensions"))
    elif name in ("pre-commit", "prek") and not any(w in _PRE_COMMIT_READS for w in argv[1:]):
        wants.append(Want(".pre-commit-config.yaml", "pre-commit", "pre-commit local hook", "up"))
        wants.append(Want(".pre-commit-config.yml", "pre-commit", "pre-commit local hook", "up"))
    elif name in _JS_RUNNERS or (name in ("node", "deno", "bun") and ("--test" in argv or sub == "test")):
        wants += [Want(p, "js", f"{name} test file", "below") for p in _JS_TESTS]
        wants += [Want(p, "js", f"{name} config", "here") for p in _JS_CONFIGS]
    elif name in ("rspec",) or (name == "bundle" and sub in ("install", "exec", "update", "check")):
        wants.append(Want("Gemfile", "ruby", "bundler Gemfile", "up"))
        if name == "rspec" or "rspec" in argv:
            wants += [Want(p, "ruby", "rspec spec file", "below") for p in ("*_spec.rb", "spec_helper.rb",
                                                                               "rails_helper.rb")]
    elif name in ("phpunit", "pest") or (name == "php" and any(w.endswith(("phpunit", "pest")) for w in argv[1:2])):
        wants += [Want("*Test.php", "php", f"{name} test file", "below"), Want("bootstrap.php", "php", f"{name} bootstrap", "below")]
    elif name == "composer" and sub in ("install", "update", "run", "run-script", "test", "i", "u"):
        wants.append(Want("composer.json", "composer", "composer scripts"))
    elif name in ("cmake",):
        wants += [Want("CMakeLists.txt", "cmake", "cmake CMakeLists.txt", "below"), Want("*.cmake", "cmake", "cmake module", "below")]
    elif name in ("terraform", "tofu", "terragrunt") and sub in ("plan", "apply", "init", "validate", "refresh", "console",
                                                                  "import", "destroy", "test"):
        wants.append(Want("*.tf", "terraform", f"{name} configuration", "below"))
    elif name == "dotnet" and sub in ("build", "test", "run", "publish", "pack", "restore", "msbuild"):
        wants += [Want(p, "msbuild", f"dotnet {p}", "below") for p in ("*.csproj", "*.fsproj", "*.vbproj", "*.props",
                                                                       "*.targets")]
    elif name == "vagrant" and sub in ("up", "provision", "reload"):
        wants.append(Want("Vagrantfile", "vagrant", "vagrant Vagrantfile", "up"))
    elif name == "direnv" and sub not in _DIRENV_READS:
        wants.append(Want(".envrc", "shell", "direnv .envrc", "up"))
    elif name == "git":
        wants += (Want(".git/config", "git-config", "git .git/config", "up"),
                  Want("~/.gitconfig", "git-config", "git ~/.gitconfig", "home"),
                  Want("~/.config/git/config", "git-config", "git ~/.config/git/config", "home"))
    return wants


# -- what a file's content runs ------------------------------------------------------------------------------
def _lines(text: str) -> list[str]:
    return text[:MAX_TEXT].split("\n")


def just_recipes(text: str) -> str:
    """A justfile's recipe lines (indented under a recipe header), as shell text."""
    out = []
    for line in _lines(text):
        if line[:1] in (" ", "\t") and line.strip() and not line.strip().startswith("#"):
            out.append(line.strip().lstrip("@-"))
        elif re.match(r"^\s*(?:set\s+|export\s+|alias\s+|import\s+|mod\s+)", line):
            continue
    return "\n".join(out)


def _yaml(text: str):
    from ruamel.yaml import YAML              # lazy: parsing YAML is rare

    return YAML(typ="safe").load(text[:MAX_TEXT])


def taskfile_commands(text: str) -> str | None:
    """go-task's `cmds` (strings or `{cmd: ...}`) anywhere in a Taskfile; None when it does not parse."""
    try:
        doc = _yaml(text)
    except Exception:                          # noqa: BLE001 - ruamel raises many kinds; unreadable is unknown
        return None
    out: list[str] = []

    def walk(node, depth: int) -> None:
        if depth > 12 or len(out) > 200:
            return
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("cmds", "cmd", "sh", "status", "preconditions") and isinstance(value, str):
                    out.append(value)
                elif key in ("cmds", "status", "preconditions") and isinstance(value, list):
                    for item in value:
                        if isinstance(item, str):
                            out.append(item)
                        else:
                            walk(item, depth + 1)
                else:
                    walk(value, depth + 1)
        elif isinstance(node, list):
            for item in node:
                walk(item, depth + 1)

    walk(doc, 0)
    return "\n".join(out)


def pre_commit_entries(text: str) -> str | None:
    """The commands of a pre-commit configuration's local hooks (`repo: local`: `entry` plus `args`)."""
    try:
        doc = _yaml(text)
    except Exception:                          # noqa: BLE001
        return None
    out = []
    for repo in (doc or {}).get("repos", []) if isinstance(doc, dict) else []:
        if not isinstance(repo, dict) or repo.get("repo") not in ("local", "meta"):
            continue
        for hook in repo.get("hooks") or []:
            if isinstance(hook, dict) and isinstance(hook.get("entry"), str):
                args = [a for a in hook.get("args") or [] if isinstance(a, str)]
                out.append(" ".join([hook["entry"]] + [shlex.quote(a) for a in args]))
    return "\n".join(out)


def tox_commands(text: str) -> str:
    """tox's `commands`, `commands_pre`, `commands_post`, `install_command` values (ini, continuation lines)."""
    out: list[str] = []
    taking = False
    for line in _lines(text):
        key = re.match(r"^\s*(commands(?:_pre|_post)?|install_command|list_dependencies_command)\s*=\s*(.*)$", line)
        if key:
            taking = True
            if key.group(2).strip():
                out.append(key.group(2).strip())
        elif taking and line[:1] in (" ", "\t") and line.strip():
            out.append(line.strip())
        else:
            taking = False
    cleaned = [re.sub(r"\{[^}]*\}", "", c).lstrip("-!").strip() for c in out]
    return "\n".join(c for c in cleaned if c and not c.startswith("#"))


def go_generate_lines(text: str) -> str:
    return "\n".join(m.group(1) for m in re.finditer(r"^//go:generate\s+(.+)$", text[:MAX_TEXT], re.M))


_RAKE_SH = re.compile(r"(?<![\w.])sh\s*\(?\s*(?:\"([^\"#]*)\"|'([^']*)')\s*\)?")


def rake_shell(text: str) -> tuple[str, str]:
    """(shell text of a Rakefile's `sh "..."` calls with literal text, the Ruby code without them)."""
    found = _RAKE_SH.finditer(text[:MAX_TEXT])
    shell = "\n".join(m.group(1) if m.group(1) is not None else m.group(2) for m in found)
    return shell, _RAKE_SH.sub("nil", text[:MAX_TEXT])


def make_recipes(text: str) -> str:
    """A makefile's recipe lines (tab-indented), as shell text."""
    return "\n".join(line[1:].lstrip("@-+") for line in _lines(text) if line.startswith("\t"))


def nox_runs(text: str) -> str:
    """`session.run("a", "b")` (and run_always/run_install/install) with literal arguments, as shell text."""
    out = []
    for match in re.finditer(r"\.(?:run|run_always|run_install|install|conda_install)\s*\(([^)]*)\)", text[:MAX_TEXT]):
        words = re.findall(r"""(?:"([^"]*)"|'([^']*)')""", match.group(1))
        if words:
            out.append(shlex.join([a or b for a, b in words]))
    return "\n".join(out)


def pyproject_backend(text: str) -> list[str]:
    """The in-tree build backend's module files (`backend-path` + `build-backend`) and a poetry build script."""
    try:
        import tomllib

        doc = tomllib.loads(text[:MAX_TEXT])
    except Exception:                          # noqa: BLE001 - unreadable: the caller treats it as unseen
        return ["<unreadable>"]
    out = []
    system = doc.get("build-system") or {}
    paths = system.get("backend-path") or []
    backend = str(system.get("build-backend") or "").split(":")[0]
    if backend and paths:
        for base in paths:
            if isinstance(base, str):
                stem = posixpath.join(base, backend.replace(".", "/"))
                out += [stem + ".py", stem + "/__init__.py"]
    poetry = ((doc.get("tool") or {}).get("poetry") or {}).get("build")
    script = poetry.get("script") if isinstance(poetry, dict) else poetry
    if isinstance(script, str):
        out.append(script)
    return out


def pth_lines(text: str) -> str:
    """The `import ...` lines of a .pth file (Python runs them at startup), as Python code."""
    return "\n".join(line for line in _lines(text) if re.match(r"^import[\s\t]", line))


def git_config_pairs(text: str) -> list[tuple[str, str]]:
    """(key, value) of a git configuration file: `[section "sub"]` + `key = value` -> `section.sub.key`."""
    pairs = []
    section = ""
    for raw in _lines(text):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        head = re.match(r'^\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\](.*)$', line)
        if head:
            section = head.group(1).lower() + ("." + head.group(2) if head.group(2) is not None else "")
            line = head.group(3).strip()
            if not line:
                continue
        key, eq, value = line.partition("=")
        value = value.strip()
        if len(value) > 1 and value[0] == value[-1] == '"':
            value = value[1:-1]
        pairs.append(((section + "." + key.strip()).lower() if section else key.strip().lower(),
                      value if eq else "true"))
    return pairs[:256]


def cargo_runners(text: str) -> str:
    """`runner = "..."` / `runner = ["..", ".."]` of a cargo configuration, as shell text."""
    out = []
    for match in re.finditer(r"^\s*runner\s*=\s*(.+)$", text[:MAX_TEXT], re.M):
        value = match.group(1).strip()
        if value.startswith("["):
            try:
                words = json.loads(value)
                out.append(shlex.join([str(w) for w in words]))
            except ValueError:
                out.append(value)
        else:
            out.append(value.strip("'\""))
    return "\n".join(out)


# Compiled code sandgate reads by scanning: the APIs that start programs or delete files, with literal
# arguments read; such an API with computed arguments makes the code opaque (the policy asks).
_NATIVE = {
    "rust": {
        "spawn": r"Command::new\s*\(\s*\"([^\"]*)\"\s*\)((?:\s*\.\s*args?\s*\((?:\s*\[?\s*\"[^\"]*\"\s*,?\s*\]?)+\s*\))*)",
        "spawn_api": r"Command::new|libc::(?:system|exec\w*)|nix::unistd::exec\w*|process::Command\b(?!::new)",
        "delete": r"(?:fs::)?remove_(?:dir_all|dir|file)\s*\(\s*\"([^\"]*)\"\s*\)",
        "delete_api": r"remove_dir_all|remove_dir|remove_file",
        "write": r"(?:fs::write|File::create)\s*\(\s*\"([^\"]*)\"",
        "write_api": r"fs::write|File::create|OpenOptions",
    },
    "go": {
        "spawn": r"exec\.Command(?:Context)?\s*\(\s*(?:ctx\s*,\s*)?((?:\"[^\"]*\"\s*,?\s*)+)\)",
        "spawn_api": r"exec\.Command|syscall\.Exec|os\.StartProcess|syscall\.ForkExec",
        "delete": r"os\.Remove(?:All)?\s*\(\s*\"([^\"]*)\"\s*\)",
        "delete_api": r"os\.Remove(?:All)?|syscall\.Unlink|syscall\.Rmdir",
        "write": r"os\.(?:WriteFile|Create)\s*\(\s*\"([^\"]*)\"",
        "write_api": r"os\.WriteFile|os\.Create|os\.OpenFile",
    },
    "gradle": {
        "spawn": r"commandLine\s*\(?\s*((?:['\"][^'\"]*['\"]\s*,?\s*)+)\)?|['\"]([^'\"]+)['\"]\s*\.execute\s*\(",
        "spawn_api": r"commandLine|\.execute\s*\(|ProcessBuilder|Runtime\.getRuntime|executable\s*[=(]",
        "delete": r"(?:project\.)?delete\s*\(?\s*['\"]([^'\"]*)['\"]",
        "delete_api": r"(?<![\w.])delete\s*[({'\"]|deleteRecursively|deleteDir|\.delete\s*\(",
        "write": r"file\s*\(\s*['\"]([^'\"]*)['\"]\s*\)\s*\.\s*(?:text\s*=|write)",
        "write_api": r"\.text\s*=|\.write\s*\(|writeText",
    },
    "maven": {
        "spawn": r"<executable>\s*([^<]+?)\s*</executable>((?:(?!</configuration>|<executable>)[\s\S])*)|"
                 r"<exec\s+executable=\"([^\"]+)\"",
        "spawn_api": r"<executable>|<exec\b|groovy-maven-plugin|<script>",
        "delete": r"<delete\s+(?:dir|file)=\"([^\"]*)\"",
        "delete_api": r"<delete\b",
        "write": r"<echo\s+file=\"([^\"]*)\"",
        "write_api": r"<echo\s+file=|<copy\b",
    },
}


def native_facts(language: str, text: str) -> CodeFacts:
    """CodeFacts of Rust, Go, Gradle (Groovy/Kotlin) or Maven (pom.xml) build code, by scanning."""
    facts = CodeFacts(language)
    spec = _NATIVE.get(language)
    if spec is None:
        facts.opaque = True
        return facts
    text = re.sub(r"(?m)^\s*//.*$", "", text[:MAX_TEXT])
    if language == "maven":
        text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    spawns = list(re.finditer(spec["spawn"], text))
    for match in spawns:
        if language == "maven" and match.group(3):
            facts.spawns.append(match.group(3))
        elif language == "maven":
            args = re.findall(r"<argument>([^<]*)</argument>", match.group(2) or "")
            facts.spawns.append(shlex.join([match.group(1)] + args))
        elif language == "gradle" and match.group(2):
            facts.spawns.append(match.group(2))
        elif language == "rust":
            words = [match.group(1)] + re.findall(r"\"([^\"]*)\"", match.group(2) or "")
            facts.spawns.append(shlex.join(words))
        else:
            words = re.findall(r"['\"]([^'\"]*)['\"]", match.group(1) or "")
            facts.spawns.append(shlex.join(words) if words else None)
    if len(re.findall(spec["spawn_api"], text)) > len(spawns):
        facts.opaque = True                    # a program started with computed arguments
    deletes = [m.group(1) for m in re.finditer(spec["delete"], text)]
    facts.deletes += deletes
    if len(re.findall(spec["delete_api"], text)) > len(deletes):
        facts.deletes.append(None)             # a computed path deleted
    writes = [m.group(1) for m in re.finditer(spec["write"], text)]
    facts.writes += writes
    if len(re.findall(spec["write_api"], text)) > len(writes):
        facts.writes.append(None)
    return facts


def composer_scripts(text: str) -> str | None:
    """The commands of a composer.json's `scripts` (strings or lists; `@other` references skipped)."""
    try:
        doc = json.loads(text[:MAX_TEXT])
    except ValueError:
        return None
    scripts = doc.get("scripts") if isinstance(doc, dict) else None
    out: list[str] = []
    for value in (scripts or {}).values() if isinstance(scripts, dict) else []:
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and not item.startswith("@"):
                out.append(item)
    return "\n".join(out)


def config_commands(language: str, text: str) -> str:
    """Shell commands held in build configuration: CMake `execute_process(COMMAND ...)`, Terraform `local-exec`
    commands and `external` programs, MSBuild `<Exec Command=...>`, a Vagrantfile's inline shell provisioners."""
    text = text[:MAX_TEXT]
    out: list[str] = []
    if language == "cmake":
        for match in re.finditer(r"(?:execute_process|add_custom_command|add_custom_target)\s*\(([^)]*)\)", text, re.I):
            body = match.group(1)
            for command in re.findall(r"COMMAND\s+(.+?)(?=\s+(?:COMMAND|WORKING_DIRECTORY|OUTPUT|DEPENDS|RESULT_VARIABLE|"
                                      r"OUTPUT_VARIABLE|ERROR_VARIABLE|VERBATIM|COMMENT|BYPRODUCTS)\b|$)", body, re.S):
                out.append(" ".join(command.split()).replace('"', ""))
    elif language == "terraform":
        out += re.findall(r"command\s*=\s*\"((?:[^\"\\]|\\.)*)\"", text)
        out += [shlex.join(re.findall(r"\"([^\"]*)\"", m)) for m in re.findall(r"program\s*=\s*\[([^\]]*)\]", text)]
        out += re.findall(r"<<-?EOT\n(.*?)\n\s*EOT", text, re.S)
    elif language == "msbuild":
        out += [m.replace("&quot;", '"').replace("&amp;", "&") for m in re.findall(r"<Exec\s[^>]*Command=\"([^\"]*)\"", text)]
    elif language == "vagrant":
        out += re.findall(r"inline:\s*\"((?:[^\"\\]|\\.)*)\"", text) + re.findall(r"inline:\s*'([^']*)'", text)
        out += [body for _tag, body in re.findall(r"<<[-~]?(\w+)\n(.*?)\n\s*\1", text, re.S)]
    return "\n".join(out)


def python_imports(text: str) -> list[str]:
    """Top-level module names a piece of Python imports (`import a.b`, `from a import b`), in order."""
    out: list[str] = []
    for match in re.finditer(r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import|import[ \t]+([\w., \t]+))", text[:MAX_TEXT],
                             re.M):
        if match.group(1):
            if not match.group(1).startswith("."):
                out.append(match.group(1))
        else:
            out += [part.strip().split(" ")[0] for part in match.group(2).split(",") if part.strip()]
    return list(dict.fromkeys(out))[:32]
