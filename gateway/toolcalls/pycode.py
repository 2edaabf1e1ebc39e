"""Python code (`python -c`, a here-doc fed to python, a script written earlier) -> CodeFacts, with the `ast`
module. Pure; never raises.

Calls are resolved through imports and aliases (`from os import system as s`, `__import__("os")`,
`getattr(os, "system")`), and path arguments are evaluated where they are literal: strings, `+`, f-strings of
literals, `os.path.join`, `pathlib.Path(...) / "x"`, `Path.home()`, `os.path.expanduser`, `os.environ["HOME"]`,
names assigned such values, and loop variables over `glob.glob(...)` / `os.listdir(...)` (a glob). Computed
code (`eval`/`exec`/`compile` of non-literals, base64 and other decoders, `pickle`, `marshal`, `ctypes`) is
opaque. A literal `exec("...")` is analysed in turn.
"""
from __future__ import annotations

import ast
import posixpath
import shlex
import warnings

from gateway.toolcalls.codefacts import MAX_CODE, CodeFacts, unparsed

_DELETE = {"os.remove", "os.unlink", "os.rmdir", "os.removedirs", "shutil.rmtree", "send2trash.send2trash"}
_WRITE_DEST = {"shutil.copy": 1, "shutil.copy2": 1, "shutil.copyfile": 1, "shutil.copytree": 1,
               "os.mkdir": 0, "os.makedirs": 0, "os.truncate": 0, "os.chmod": 0, "os.chown": 0, "os.lchown": 0,
               "shutil.chown": 0, "os.mkfifo": 0, "os.utime": 0}
_MOVE = {"os.rename", "os.renames", "os.replace", "shutil.move"}
_LINK = {"os.symlink", "os.link"}
_SHELL_TEXT = {"os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput", "commands.getoutput",
               "asyncio.create_subprocess_shell", "os.popen2", "os.popen3", "platform.popen"}
_SPAWN_ARGS = {"subprocess.run", "subprocess.call", "subprocess.check_call", "subprocess.check_output",
               "subprocess.Popen", "pty.spawn", "sh.Command"}
_SPAWN_VARARGS = {"asyncio.create_subprocess_exec"}
_OPAQUE = {"base64.b64decode", "base64.b32decode", "base64.b16decode", "base64.a85decode", "base64.b85decode",
           "base64.decodebytes", "base64.standard_b64decode", "base64.urlsafe_b64decode", "codecs.decode",
           "bytes.fromhex", "binascii.unhexlify", "binascii.a2b_base64", "binascii.a2b_hex", "zlib.decompress",
           "gzip.decompress", "bz2.decompress", "lzma.decompress", "marshal.loads", "pickle.loads", "pickle.load",
           "dill.loads", "types.CodeType", "types.FunctionType", "runpy.run_path", "runpy.run_module",
           "importlib.util.spec_from_file_location", "code.InteractiveInterpreter", "code.interact"}
_OPAQUE_MODULES = ("ctypes", "cffi", "_posixsubprocess", "posix")
_HTTP = {"requests", "httpx", "requests.Session", "httpx.Client"}
_RAW_NETWORK = ("socket.socket", "socket.create_connection", "smtplib.SMTP", "smtplib.SMTP_SSL", "ftplib.FTP",
                "telnetlib.Telnet", "paramiko.SSHClient", "http.client.HTTPConnection",
                "http.client.HTTPSConnection", "asyncio.open_connection")
_PATH_CLASSES = {"pathlib.Path", "pathlib.PosixPath", "pathlib.PurePath", "pathlib.PurePosixPath", "Path"}
_PATH_METHODS_DELETE = {"unlink", "rmdir"}
_PATH_METHODS_WRITE = {"write_text", "write_bytes", "touch", "mkdir", "chmod", "lchmod"}
_ARGV_FORMS = {"execv", "execve", "execvp", "execvpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "posix_spawn",
               "posix_spawnp"}
_MAX_EVAL_DEPTH = 12
_MAX_VALUES = 16


def analyze_python(code: str) -> CodeFacts:
    """CodeFacts of Python source (see the module docstring); unparsed for syntax errors or huge input."""
    if not isinstance(code, str) or len(code) > MAX_CODE:
        return unparsed("python")
    try:
        return _Analyzer(code, 0).run()
    except (RecursionError, MemoryError, ValueError, SyntaxError, TypeError, OverflowError):
        return unparsed("python")


class _Analyzer:
    def __init__(self, code: str, depth: int):
        self.code, self.depth = code, depth
        self.facts = CodeFacts("python")
        self.names: dict[str, str] = {}           # local name -> qualified name (imports)
        self.values: dict[str, list[ast.AST]] = {}  # local name -> expressions assigned to it
        self.loops: dict[str, list[str]] = {}      # loop variable -> glob patterns

    def run(self) -> CodeFacts:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")         # SyntaxWarning for odd escapes: the code is still Python
            tree = ast.parse(self.code)
        nodes = list(ast.walk(tree))
        for node in nodes:
            self.collect(node)
        for node in nodes:
            if isinstance(node, ast.Call):
                self.call(node)
        return self.facts

    # -- names --------------------------------------------------------------------------------------
    def collect(self, node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                self.names[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else \
                    alias.name.split(".")[0]
                if alias.name.split(".")[0] in _OPAQUE_MODULES:
                    self.facts.opaque = True
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.split(".")[0] in _OPAQUE_MODULES:
                self.facts.opaque = True
            for alias in node.names:
                if alias.name == "*":
                    for name in ("system", "popen", "remove", "unlink", "rmdir", "removedirs", "rmtree",
                                 "run", "call", "check_call", "check_output", "Popen", "getoutput", "spawn",
                                 "execv", "execvp", "execl", "execlp", "rename", "replace", "move", "symlink"):
                        self.names.setdefault(name, f"{module}.{name}")
                else:
                    self.names[alias.asname or alias.name] = f"{module}.{alias.name}"
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.values.setdefault(target.id, []).append(node.value)
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and isinstance(node.target, ast.Name) \
                and node.value is not None:
            self.values.setdefault(node.target.id, []).append(node.value)
        elif isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name):
            patterns = self.listing(node.iter)
            if patterns is not None:
                self.loops.setdefault(node.target.id, []).extend(patterns)
        elif isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Tuple) \
                and isinstance(node.iter, ast.Call) and self.qualname(node.iter.func) == "os.walk" and node.iter.args:
            top = self.strings(node.iter.args[0])           # for root, dirs, files in os.walk(top)
            names = [e.id for e in node.target.elts if isinstance(e, ast.Name)]
            if top is not None and names:
                self.loops.setdefault(names[0], []).extend(top)
                for name in names[1:]:
                    self.loops.setdefault(name, []).append("*")
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if isinstance(item.optional_vars, ast.Name):
                    self.values.setdefault(item.optional_vars.id, []).append(item.context_expr)

    def qualname(self, func: ast.AST, depth: int = 0) -> str | None:
        """The dotted name a call target resolves to (imports, __import__, getattr with a literal)."""
        if depth > _MAX_EVAL_DEPTH:
            return None
        if isinstance(func, ast.Name):
            if func.id in self.names:
                return self.names[func.id]
            if func.id in self.values and len(self.values[func.id]) == 1:
                return self.qualname(self.values[func.id][0], depth + 1)
            return func.id
        if isinstance(func, ast.Attribute):
            base = self.qualname(func.value, depth + 1)
            return f"{base}.{func.attr}" if base else None
        if isinstance(func, ast.Call):
            inner = self.qualname(func.func, depth + 1)
            if inner in ("__import__", "importlib.import_module", "builtins.__import__") and func.args:
                module = self.strings(func.args[0])
                if module is None or len(module) != 1:
                    self.facts.opaque = True
                    return None
                return module[0]
            if inner in ("getattr", "builtins.getattr") and len(func.args) >= 2:
                attr, base = self.strings(func.args[1]), self.qualname(func.args[0], depth + 1)
                if attr is None or len(attr) != 1:
                    self.facts.opaque = True
                    return None
                return f"{base}.{attr[0]}" if base else None
        return None

    # -- values -------------------------------------------------------------------------------------
    def strings(self, node: ast.AST | None, depth: int = 0) -> list[str] | None:
        """The possible literal string values of an expression, or None when computed."""
        if node is None or depth > _MAX_EVAL_DEPTH:
            return None
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                return [node.value]
            if isinstance(node.value, bytes):
                return [node.value.decode("utf-8", "replace")]
            return None
        if isinstance(node, ast.JoinedStr):
            parts: list[list[str]] = []
            for value in node.values:
                part = self.strings(value.value if isinstance(value, ast.FormattedValue) else value, depth + 1)
                if part is None:
                    return None
                parts.append(part)
            return _product(parts, "")
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Div)):
            left, right = self.strings(node.left, depth + 1), self.strings(node.right, depth + 1)
            if left is None or right is None:
                return None
            sep = "/" if isinstance(node.op, ast.Div) else ""
            return _product([left, right], sep)
        if isinstance(node, ast.Name):
            if node.id in self.loops:
                return self.loops[node.id][:_MAX_VALUES]
            if node.id in self.values:
                out: list[str] = []
                for value in self.values[node.id]:
                    got = self.strings(value, depth + 1)
                    if got is None:
                        return None
                    out.extend(got)
                return out[:_MAX_VALUES] or None
            return None
        if isinstance(node, ast.Subscript):
            name = self.qualname(node.value)
            key = self.strings(node.slice, depth + 1)
            if name in ("os.environ",) and key == ["HOME"]:
                return ["~"]
            return None
        if isinstance(node, ast.Call):
            return self.call_value(node, depth)
        return None

    def call_value(self, node: ast.Call, depth: int) -> list[str] | None:
        name = self.qualname(node.func) or ""
        args = node.args
        if name in ("os.getcwd", "pathlib.Path.cwd", "Path.cwd", "os.getcwdb"):
            return ["."]
        if name in ("pathlib.Path.home", "Path.home"):
            return ["~"]
        if name in ("os.getenv", "os.environ.get") and args and self.strings(args[0], depth + 1) == ["HOME"]:
            return ["~"]
        if name in _PATH_CLASSES or name in ("str", "os.fspath", "os.path.expanduser", "os.path.abspath",
                                             "os.path.realpath", "os.path.normpath", "os.path.expandvars"):
            if not args:
                return ["."]
            parts = [self.strings(a, depth + 1) for a in args]
            return None if any(p is None for p in parts) else _product(parts, "/")  # type: ignore[misc]
        if name in ("os.path.join", "posixpath.join"):
            parts = [self.strings(a, depth + 1) for a in args]
            if any(p is None for p in parts) or not parts:
                return None
            return [posixpath.join(*combo.split("\0")) for combo in _product(parts, "\0")]  # type: ignore[misc]
        if name == "os.path.dirname" and args:
            got = self.strings(args[0], depth + 1)
            return None if got is None else [posixpath.dirname(g.rstrip("/")) or "/" for g in got]
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("expanduser", "resolve", "absolute",
                                                                       "as_posix", "strip", "rstrip"):
            return self.strings(node.func.value, depth + 1)
        if isinstance(node.func, ast.Attribute) and node.func.attr == "joinpath":
            parts = [self.strings(node.func.value, depth + 1)] + [self.strings(a, depth + 1) for a in args]
            return None if any(p is None for p in parts) else _product(parts, "/")  # type: ignore[misc]
        return None

    def listing(self, node: ast.AST) -> list[str] | None:
        """Glob patterns for what a loop iterates: glob.glob(p), os.listdir(d), Path(d).iterdir()/glob(p), and
        the name lists of os.walk."""
        if isinstance(node, ast.Name) and node.id in self.loops:
            return ["*"]
        if not isinstance(node, ast.Call):
            return None
        name = self.qualname(node.func) or ""
        if name in ("glob.glob", "glob.iglob") and node.args:
            return self.strings(node.args[0])
        if name in ("os.listdir", "os.scandir") or (isinstance(node.func, ast.Attribute) and
                                                     node.func.attr == "iterdir"):
            base = self.strings(node.args[0]) if node.args else (
                self.strings(node.func.value) if isinstance(node.func, ast.Attribute) else ["."])
            return None if base is None else [b.rstrip("/") + "/*" for b in base]
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("glob", "rglob") and node.args:
            base, pattern = self.strings(node.func.value), self.strings(node.args[0])
            if base is None or pattern is None:
                return None
            return [b.rstrip("/") + "/" + p for b in base for p in pattern]
        return None

    # -- calls --------------------------------------------------------------------------------------
    def call(self, node: ast.Call) -> None:
        name = self.qualname(node.func) or ""
        facts, args = self.facts, node.args
        first = args[0] if args else None
        if name in ("eval", "exec", "compile", "builtins.eval", "builtins.exec", "execfile"):
            texts = self.strings(first)
            if texts is None or self.depth > 3:
                facts.opaque = True
            else:
                for text in texts:
                    self.nested(text)
        elif name in _OPAQUE or name.split(".")[0] in _OPAQUE_MODULES:
            facts.opaque = True
        elif name in ("__import__", "importlib.import_module", "builtins.__import__"):
            facts.opaque = facts.opaque or self.strings(first) is None
        elif name in _DELETE:
            facts.deletes.extend(self.paths(first))
        elif name in _WRITE_DEST:
            facts.writes.extend(self.paths(args[_WRITE_DEST[name]] if len(args) > _WRITE_DEST[name] else None))
        elif name in _MOVE:
            facts.moves.extend(self.paths(first))
            facts.writes.extend(self.paths(args[1] if len(args) > 1 else None))
        elif name in _LINK:
            for target in self.paths(first):
                for link in self.paths(args[1] if len(args) > 1 else None):
                    facts.links.append((target, link))
        elif name in ("open", "io.open", "codecs.open", "builtins.open", "os.open"):
            if self.opens_for_writing(node, name):
                facts.writes.extend(self.paths(first))
        elif name in _SHELL_TEXT:
            facts.spawns.extend(self.strings(first) or [None])
        elif name in _SPAWN_ARGS:
            facts.spawns.extend(self.argv_text(first))
        elif name in _SPAWN_VARARGS:
            facts.spawns.append(self.join(args))
        elif name.startswith(("os.exec", "os.spawn", "os.posix_spawn")):
            facts.spawns.append(self.exec_text(name, args))
        elif name.rsplit(".", 1)[0] in _HTTP and name.rsplit(".", 1)[-1] in ("post", "put", "patch", "delete",
                                                                              "request"):
            self.http(node, name)
        elif name in _RAW_NETWORK:
            facts.http.append(("SEND", None))     # a raw connection: whatever it sends is not visible
        elif name in ("urllib.request.urlopen", "urllib.request.Request") and (
                len(args) > 1 or any(k.arg in ("data", "method") for k in node.keywords)):
            method = self.keyword(node, "method")
            facts.http.append(((method or ["POST"])[0].upper(), (self.strings(first) or [None])[0]))
        elif isinstance(node.func, ast.Attribute):
            self.method(node)

    def method(self, node: ast.Call) -> None:
        attr = node.func.attr  # type: ignore[attr-defined]
        receiver = node.func.value  # type: ignore[attr-defined]
        if not self.is_path(receiver):
            return
        if attr in _PATH_METHODS_DELETE:
            self.facts.deletes.extend(self.paths(receiver))
        elif attr in _PATH_METHODS_WRITE or (attr == "open" and self.opens_for_writing(node, "Path.open")):
            self.facts.writes.extend(self.paths(receiver))
        elif attr in ("rename", "replace"):
            self.facts.moves.extend(self.paths(receiver))
            self.facts.writes.extend(self.paths(node.args[0] if node.args else None))
        elif attr in ("symlink_to", "hardlink_to"):
            for target in self.paths(node.args[0] if node.args else None):
                for link in self.paths(receiver):
                    self.facts.links.append((target, link))

    def is_path(self, node: ast.AST, depth: int = 0) -> bool:
        if depth > _MAX_EVAL_DEPTH:
            return False
        if isinstance(node, ast.Call):
            name = self.qualname(node.func) or ""
            if name in _PATH_CLASSES or name in ("pathlib.Path.home", "Path.home", "pathlib.Path.cwd", "Path.cwd"):
                return True
            return isinstance(node.func, ast.Attribute) and node.func.attr in ("expanduser", "resolve", "absolute",
                                                                              "joinpath", "with_name",
                                                                              "with_suffix") \
                and self.is_path(node.func.value, depth + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return self.is_path(node.left, depth + 1)
        if isinstance(node, ast.Name):
            if node.id in self.loops:
                return True
            return any(self.is_path(v, depth + 1) for v in self.values.get(node.id, []))
        return False

    def opens_for_writing(self, node: ast.Call, name: str) -> bool:
        if name == "os.open":
            flags = ast.unparse(node.args[1]) if len(node.args) > 1 else ""
            return any(f in flags for f in ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND"))
        position = 0 if name == "Path.open" else 1
        mode_node = node.args[position] if len(node.args) > position else None
        mode = self.strings(mode_node) if mode_node is not None else self.keyword(node, "mode")
        if mode_node is None and mode is None:
            return False
        return mode is None or any(ch in m for m in mode for ch in "wax+")

    def keyword(self, node: ast.Call, key: str) -> list[str] | None:
        for kw in node.keywords:
            if kw.arg == key:
                return self.strings(kw.value)
        return None

    def paths(self, node: ast.AST | None) -> list[str | None]:
        got = self.strings(node) if node is not None else None
        return [None] if not got else list(got)

    def argv_text(self, node: ast.AST | None) -> list[str | None]:
        """subprocess.run(...)'s first argument as shell text: a string as is, a list of strings joined."""
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.join(node.elts)]
        texts = self.strings(node) if node is not None else None
        return list(texts) if texts else [None]

    def join(self, nodes: list[ast.AST]) -> str | None:
        words: list[str] = []
        for element in nodes:
            got = self.strings(element)
            if got is None or len(got) != 1:
                return None
            words.append(got[0])
        return shlex.join(words) if words else None

    def exec_text(self, name: str, args: list[ast.AST]) -> str | None:
        args = args[1:] if name.startswith("os.spawn") else args      # spawn*(mode, path, ...)
        if len(args) < 2:
            return None
        if name.rsplit(".", 1)[-1] in _ARGV_FORMS:                        # execv(path, argv)
            argv = args[1]
            return self.join(argv.elts) if isinstance(argv, (ast.List, ast.Tuple)) else None
        return self.join(args[1:])                                       # execl(path, arg0, arg1, ...)

    def http(self, node: ast.Call, name: str) -> None:
        verb = name.rsplit(".", 1)[-1]
        args = node.args
        if verb == "request":
            method = self.strings(args[0]) if args else self.keyword(node, "method")
            url = self.strings(args[1]) if len(args) > 1 else self.keyword(node, "url")
        else:
            method, url = [verb], self.strings(args[0]) if args else self.keyword(node, "url")
        self.facts.http.append(((method or ["POST"])[0].upper(), (url or [None])[0]))

    def nested(self, text: str) -> None:
        try:
            inner = _Analyzer(text, self.depth + 1).run()
        except (SyntaxError, ValueError, RecursionError, MemoryError, TypeError, OverflowError):
            self.facts.parsed = False
            return
        for key in ("deletes", "writes", "moves", "links", "spawns", "http"):
            getattr(self.facts, key).extend(getattr(inner, key))
        self.facts.opaque = self.facts.opaque or inner.opaque
        self.facts.parsed = self.facts.parsed and inner.parsed


def _product(parts: list[list[str]], sep: str) -> list[str]:
    out = [""]
    for index, options in enumerate(parts):
        out = [a + (sep if index and sep else "") + b for a in out for b in options][:_MAX_VALUES]
    return out
