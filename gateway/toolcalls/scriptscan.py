"""Inline code of perl, ruby, node/deno/bun, php, lua, R, julia, AppleScript, awk, sed, vim/ex, emacs, gdb and
tcl -> CodeFacts, by scanning for each language's delete, write, move, link and spawn APIs.

Pure; never raises. A call's literal arguments are evaluated (string literals, joined by the language's concat
operator; the language's spelling of the home directory counts as "~"); anything else is computed (None).
A program started with literal text is handed back as shell text, so the shell parser judges it. Code that
builds code at run time (string eval, base64 decoders, ...) is opaque.
"""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

from gateway.toolcalls.codefacts import MAX_CODE, CodeFacts, unparsed

_HOME_MARK = "\x00HOME\x00"
_R = r"(?<![\w$.])"            # a name not preceded by a word character or a member access


def _api(*names: str) -> str:
    return _R + "(?:" + "|".join(names) + r")(?![\w])"


@dataclass(frozen=True)
class _Lang:
    deletes: str = ""            # API regex: the first argument is deleted
    writes: str = ""             # API regex: the first argument is written
    write_last: str = ""         # API regex: the last argument is written (copy(src, dst), chmod(mode, f))
    moves: str = ""              # API regex: (src, dst): src moved away, dst written
    links: str = ""              # API regex: (target, link)
    spawns: str = ""             # API regex: the arguments are a command
    inline: str = ""             # regex with one group: inline shell text (`...`, qx{...}, %x(...))
    opaque: str = ""             # regex: code computed at run time
    home: str = ""               # regex: the home directory
    concat: str = r"\+"


_JS_FS = r"(?:(?:fs|fsp|fse|fsPromises|promises|fs\.promises|require\(\s*['\"](?:node:)?fs(?:/promises)?['\"]\s*\))\s*\.\s*)"
_JS_CP = r"(?:(?:child_process|childProcess|cp|require\(\s*['\"](?:node:)?child_process['\"]\s*\))\s*\.\s*)"
_LANGS: dict[str, _Lang] = {
    "perl": _Lang(
        deletes=_api("unlink", "rmdir", "rmtree", "remove_tree", r"File::Path::rmtree", r"File::Path::remove_tree"),
        writes=_api("mkdir", "make_path", "mkpath", "truncate"),
        write_last=_api("copy", "cp", r"File::Copy::copy", "chmod", "chown", "utime"),
        moves=_api("rename", "move", "mv", r"File::Copy::move"), links=_api("symlink", "link"),
        spawns=_api("system", "exec", "open2", "open3", r"IPC::Open3::open3", r"IPC::Run::run", "readpipe"),
        inline=r"`([^`]*)`|\bqx\s*(?:\{([^}]*)\}|\(([^)]*)\)|\[([^\]]*)\]|/([^/]*)/|\|([^|]*)\||!([^!]*)!)",
        concat=r"\.",
        opaque=r"(?<![\w$])eval\s*(?!\{)[\"'$(q]|decode_base64|MIME::Base64|\bpack\s*\(?\s*['\"][um]|"
               r"\bunpack\s*\(?\s*['\"][um]|Storable::thaw|\bthaw\s*\(",
        home=r"\$ENV\{\s*['\"]?HOME['\"]?\s*\}|File::HomeDir->my_home|\(getpwuid\(\$<\)\)\[7\]"),
    "ruby": _Lang(
        deletes=_api(r"FileUtils\.(?:rm_rf|rm_r|rm_f|rm|remove_dir|remove_entry|remove_entry_secure|remove|"
                     r"rmdir|rmtree|rm_f)", r"File\.(?:delete|unlink)", r"Dir\.(?:rmdir|delete|unlink)",
                     r"Pathname(?:\.new)?\s*\([^)]*\)\s*\.\s*(?:rmtree|delete|unlink)"),
        writes=_api(r"File\.(?:write|binwrite)", r"IO\.(?:write|binwrite)", r"FileUtils\.(?:touch|mkdir_p|mkdir|"
                    r"makedirs)", r"Dir\.mkdir", r"File\.open\s*\(\s*[^,)]+,\s*['\"][wa+]"),
        write_last=_api(r"FileUtils\.(?:cp|cp_r|copy|install|chmod|chmod_R|chown|chown_R)", r"File\.(?:chmod|chown)"),
        moves=_api(r"FileUtils\.(?:mv|move)", r"File\.rename"),
        links=_api(r"FileUtils\.(?:ln_s|ln_sf|ln|symlink)", r"File\.(?:symlink|link)"),
        spawns=_api("system", "exec", "spawn", r"Kernel\.(?:system|exec|spawn)", r"Process\.spawn",
                    r"IO\.popen", r"Open3\.(?:capture2e?|capture3|popen2e?|popen3|pipeline\w*)", "open"),
        inline=r"`([^`]*)`|%x\s*(?:\{([^}]*)\}|\(([^)]*)\)|\[([^\]]*)\]|\|([^|]*)\||!([^!]*)!)",
        opaque=r"(?<![\w.])(?:eval|instance_eval|class_eval|module_eval)\s*\(?\s*[\"'%a-zA-Z_]|Base64\.|"
               r"\.unpack1?\s*\(?\s*['\"]m|Marshal\.load|\.send\s*\(\s*[a-z_$@]",
        home=r"Dir\.home|ENV\s*\[\s*['\"]HOME['\"]\s*\]|ENV\.fetch\s*\(\s*['\"]HOME['\"][^)]*\)|"
             r"File\.expand_path\s*\(\s*['\"]~['\"]\s*\)|Etc\.getpwuid\.dir"),
    "js": _Lang(
        deletes=r"(?:" + _JS_FS + r"?(?:rmSync|rmdirSync|unlinkSync|removeSync|emptyDirSync)|" + _JS_FS +
                r"(?:rm|rmdir|unlink|remove|emptyDir)|(?<![\w.])rimraf(?:\.sync)?|Deno\.remove(?:Sync)?)(?=\s*\()",
        writes=r"(?:" + _JS_FS + r"?(?:writeFileSync|appendFileSync|mkdirSync|truncateSync|createWriteStream|"
               r"outputFileSync|mkdirpSync|ensureDirSync)|" + _JS_FS + r"(?:writeFile|appendFile|mkdir|truncate|"
               r"outputFile)|Deno\.(?:writeTextFile|writeFile|mkdir|truncate)(?:Sync)?|Bun\.write)(?=\s*\()",
        write_last=r"(?:" + _JS_FS + r"?(?:copyFileSync|cpSync|chmodSync|chownSync|copySync)|" + _JS_FS +
                   r"(?:copyFile|cp|chmod|chown|copy)|Deno\.(?:copyFile|chmod|chown)(?:Sync)?)(?=\s*\()",
        moves=r"(?:" + _JS_FS + r"?(?:renameSync|moveSync)|" + _JS_FS + r"(?:rename|move)|Deno\.rename(?:Sync)?)(?=\s*\()",
        links=r"(?:" + _JS_FS + r"?(?:symlinkSync|linkSync)|" + _JS_FS + r"(?:symlink|link)|"
              r"Deno\.(?:symlink|link)(?:Sync)?)(?=\s*\()",
        spawns=r"(?:" + _JS_CP + r"?(?:execSync|execFileSync|spawnSync)|" + _JS_CP + r"(?:exec|execFile|spawn|fork)|"
               r"(?<![\w.])(?:exec|execFile|spawn|fork)(?=\s*\(\s*['\"`])|Deno\.run|new\s+Deno\.Command|"
               r"Bun\.spawn(?:Sync)?|(?<![\w.])execa(?:Sync|Command|CommandSync)?)(?=\s*\()",
        inline=r"(?<![\w])\$`([^`]*)`",
        opaque=r"(?<![\w.])(?:eval|Function)\s*\(|new\s+Function\b|\bvm\s*\.\s*run|['\"]base64['\"]|\batob\s*\(|"
               r"process\.binding|require\s*\(\s*[^'\"`\s)]|import\s*\(\s*[^'\"`\s)]|String\.fromCharCode",
        home=r"(?:require\(\s*['\"](?:node:)?os['\"]\s*\)|\bos)\s*\.\s*homedir\s*\(\s*\)|"
             r"process\.env\s*(?:\.\s*HOME|\[\s*['\"]HOME['\"]\s*\])|Deno\.env\.get\s*\(\s*['\"]HOME['\"]\s*\)|"
             r"Bun\.env\.HOME"),
    "php": _Lang(
        deletes=_api("unlink", "rmdir"), writes=_api("file_put_contents", "mkdir", "touch", "ftruncate"),
        write_last=_api("copy", "chmod", "chown", "chgrp"), moves=_api("rename"), links=_api("symlink", "link"),
        spawns=_api("system", "exec", "shell_exec", "passthru", "proc_open", "popen", "pcntl_exec"),
        inline=r"`([^`]*)`", concat=r"\.",
        opaque=r"(?<![\w>])(?:eval|assert|create_function|base64_decode|gzinflate|gzuncompress|str_rot13|"
               r"convert_uudecode|hex2bin)\s*\(|\$\w+\s*\(|preg_replace\s*\(\s*['\"].*/e['\"]",
        home=r"getenv\s*\(\s*['\"]HOME['\"]\s*\)|\$_(?:SERVER|ENV)\s*\[\s*['\"]HOME['\"]\s*\]"),
    "lua": _Lang(deletes=_api(r"os\.remove"), writes=_api(r"io\.open\s*\(\s*[^,)]+,\s*['\"][wa+]"),
                 moves=_api(r"os\.rename"), spawns=_api(r"os\.execute", r"io\.popen"), concat=r"\.\.",
                 opaque=r"(?<![\w.])(?:load|loadstring|dofile|loadfile)\s*\(",
                 home=r"os\.getenv\s*\(\s*['\"]HOME['\"]\s*\)"),
    "r": _Lang(deletes=_api("unlink", r"file\.remove"), writes=_api(r"file\.create", r"dir\.create"),
               write_last=_api("writeLines", r"file\.copy", "saveRDS", "write"),
               moves=_api(r"file\.rename"), links=_api(r"file\.symlink"), spawns=_api("system", "system2", "shell"),
               opaque=r"eval\s*\(\s*parse\s*\(|base64", home=r"Sys\.getenv\s*\(\s*['\"]HOME['\"]\s*\)|path\.expand\s*\(\s*['\"]~['\"]\s*\)"),
    "julia": _Lang(deletes=_api("rm"), writes=_api("mkpath", "mkdir", "touch"), write_last=_api("cp"),
                   moves=_api("mv"), links=_api("symlink"), inline=r"`([^`]*)`", concat=r"\*",
                   opaque=r"eval\s*\(\s*Meta\.parse|include_string|base64decode", home=r"homedir\s*\(\s*\)"),
    "applescript": _Lang(spawns=r"do shell script", deletes=r"\bdelete\b", opaque=r"\brun script\b",
                         home=r"\(?\s*path to home folder\s*\)?|POSIX path of \(path to home folder\)", concat=r"&"),
    "jxa": _Lang(spawns=r"doShellScript", deletes=r"removeItemAtPath(?:Error)?", opaque=r"(?<![\w.])eval\s*\(",
                 home=r"\$\.NSHomeDirectory\(\)(?:\.js)?"),
    "awk": _Lang(spawns=_api("system"), inline=r"\"((?:[^\"\\]|\\.)*)\"\s*\|\s*getline"),
    "elisp": _Lang(spawns=r"\((?:shell-command(?:-to-string)?|call-process(?:-shell-command)?|start-process"
                          r"(?:-shell-command)?|process-lines)\b", deletes=r"\((?:delete-directory|delete-file)\b",
                   writes=r"\((?:write-region|make-directory|copy-file|rename-file)\b",
                   opaque=r"\(eval\s+\(read|base64-decode", home=r"\(getenv \"HOME\"\)|\(expand-file-name \"~\"\)"),
    "tcl": _Lang(spawns=r"\bexec\b|\bspawn\b|\bopen\s+\"\|", deletes=r"\bfile\s+delete\b",
                 writes=r"\bfile\s+(?:mkdir|copy|rename)\b", opaque=r"\beval\b|\bbinary\s+decode",
                 home=r"\$(?:env\(HOME\)|::env\(HOME\))"),
}
_LANGS["typescript"] = _LANGS["js"]
_DEFAULT_SPACE_ARGS = frozenset({"applescript", "tcl", "elisp"})
MAX_CALLS = 64               # more delete/write/spawn calls than this in one script: unparsed (ask)
MAX_ARGS_TEXT = 8 * 1024     # one call's argument text is read this far at most


def analyze_script(language: str, code: str) -> CodeFacts:
    """CodeFacts of `code` in `language` (a key of the language table, or awk/sed/vim/gdb/pwsh)."""
    if not isinstance(code, str) or len(code) > MAX_CODE:
        return unparsed(language)
    try:
        if language == "sed":
            return _sed(code)
        if language == "vim":
            return _vim(code)
        if language == "pwsh":
            return _pwsh(code)
        if language == "perl":
            facts = _scan("perl", code)
            _perl_open(code, facts)
            return facts
        if language == "awk":
            facts = _scan("awk", code)
            _awk_redirects(code, facts)
            return facts
        return _scan(language, code)
    except (RecursionError, MemoryError, ValueError):
        return unparsed(language)


def _scan(language: str, code: str) -> CodeFacts:
    lang = _LANGS.get(language)
    facts = CodeFacts(language)
    if lang is None:
        facts.parsed = False
        return facts
    if lang.home:
        code = re.sub(r"[#$]\{\s*(?:" + lang.home + r")\s*\}", _HOME_MARK, code)
        code = re.sub(lang.home, _HOME_MARK, code)
    if lang.opaque and re.search(lang.opaque, code):
        facts.opaque = True
    if lang.inline:
        for match in re.finditer(lang.inline, code):
            text = next((g for g in match.groups() if g is not None), "")
            facts.spawns.append(text.replace(_HOME_MARK, "~"))
        code = re.sub(lang.inline, lambda m: " " * len(m.group()), code)
    names = _names(code, lang.concat)
    calls = 0
    for key in ("deletes", "writes", "write_last", "moves", "links", "spawns"):
        pattern = getattr(lang, key)
        if not pattern:
            continue
        for match in re.finditer(pattern, code):
            calls += 1
            if calls > MAX_CALLS:        # each call scans its arguments: thousands of them ran for minutes
                return unparsed(language)
            if language in _DEFAULT_SPACE_ARGS:
                value = _first_literal(code, match.end(), language)
                _record(facts, key, [value], [value or ""])
                continue
            args = [_resolve_names(a, names) for a in _call_args(code, match.end(), False)]
            _record(facts, key, [_literal(a, lang.concat) for a in args], args)
    return facts


def _first_literal(code: str, pos: int, language: str) -> str | None:
    """The first string literal after pos (tcl: the rest of the command when it starts with a bare word)."""
    rest = code[pos:pos + 4096]
    match = re.match(r"\s*(?:'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"|(" + _HOME_MARK + "))", rest)
    if match:
        value = match.group(1) if match.group(1) is not None else match.group(2)
        return "~" if value is None else value.replace(_HOME_MARK, "~")
    if language == "tcl":
        bare = re.match(r"\s*([^\]\n;\"{}$]+)", rest)
        return bare.group(1).strip().replace(_HOME_MARK, "~") if bare and bare.group(1).strip() else None
    return None


def _record(facts: CodeFacts, key: str, values: list[str | None], raw: list[str]) -> None:
    first = values[0] if values else None
    if key == "deletes":
        facts.deletes.append(first)
    elif key == "writes":
        facts.writes.append(first)
    elif key == "write_last":
        facts.writes.append(values[-1] if values else None)
    elif key == "moves":
        facts.moves.append(first)
        facts.writes.append(values[1] if len(values) > 1 else None)
    elif key == "links":
        facts.links.append((first, values[1] if len(values) > 1 else None))
    else:
        facts.spawns.append(_command_text(values, raw))


def _command_text(values: list[str | None], raw: list[str]) -> str | None:
    """A spawn's arguments as shell text: one literal as is; several literals (or a literal and an array of
    literals) as an argv."""
    if not values:
        return None
    array = re.search(r"\bargs\s*:\s*(\[[^\]]*\])", raw[1]) if len(raw) > 1 else None
    second = raw[1].strip() if len(raw) > 1 and raw[1].lstrip().startswith("[") else (array.group(1) if array else "")
    if values[0] is not None and second:                  # spawn('rm', ['-rf', '/']) / Command('rm', {args: [...]})
        items = [_literal(a, r"\+") for a in _split_args(second[1:-1])]
        if all(i is not None for i in items):
            return shlex.join([values[0]] + items)  # type: ignore[list-item]
    if raw and raw[0].lstrip().startswith("["):
        items = [_literal(a, r"\+") for a in _split_args(raw[0].strip()[1:-1])]
        return shlex.join(items) if items and all(i is not None for i in items) else None  # type: ignore[arg-type]
    literal = [v for v in values if v is not None]
    if len(literal) == len(values) and len(values) > 1 and " " not in values[0]:  # type: ignore[operator]
        return shlex.join(literal)
    return values[0]


def _call_args(code: str, pos: int, spaces: bool) -> list[str]:
    """The argument texts after an API name at pos: `(a, b)` or, without parentheses, up to the end of the
    statement."""
    while pos < len(code) and code[pos] in " \t":
        pos += 1
    if pos < len(code) and code[pos] == "(":
        end = _matching(code, pos)
        return _split_args(code[pos + 1:end])
    end = pos
    while end < len(code) and code[end] not in ";\n}":
        quote_like = re.match(r"qq?\s*[{(\[]", code[end:end + 8]) if code[end] == "q" else None
        if quote_like:                             # perl q{...} / qq(...): one string
            end = _matching(code, end + quote_like.end() - 1)
        elif code[end] in "'\"`":
            end = _string_end(code, end)
        end += 1
    text = code[pos:end]
    if spaces:
        return [text]
    return _split_args(text)


def _matching(code: str, start: int) -> int:
    depth, i, stop = 0, start, min(len(code), start + MAX_ARGS_TEXT)
    while i < stop:
        c = code[i]
        if c in "'\"`":
            i = _string_end(code, i)
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return stop


def _string_end(code: str, start: int) -> int:
    quote, i = code[start], start + 1
    while i < len(code):
        if code[i] == "\\":
            i += 2
            continue
        if code[i] == quote:
            return i
        i += 1
    return len(code) - 1


def _split_args(text: str) -> list[str]:
    out, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c in "'\"`":
            i = _string_end(text, i)
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
        i += 1
    if text[start:].strip() or out:
        out.append(text[start:])
    return out


_STRING = re.compile(r"'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"|`([^`$]*)`|" + _HOME_MARK +
                     r"|\bqq?\s*(?:\{([^}]*)\}|\(([^)]*)\)|\[([^\]]*)\])")
_ASSIGNED = re.compile(r"(?:\b(?:const|let|var|my|local|our)\s+)?(\$?[A-Za-z_][\w$]*)\s*(?<![=!<>])=(?!=)\s*"
                       r"('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\s*(?=[;\n}]|$)")


def _names(code: str, concat: str) -> dict[str, str]:
    """Variables assigned a string literal (`cmd = "rm -rf ~"`), so a call with the variable reads it."""
    out: dict[str, str] = {}
    for match in _ASSIGNED.finditer(code):
        value = _literal(match.group(2), concat)
        if value is not None:
            out[match.group(1)] = value
    return out


def _resolve_names(text: str, names: dict[str, str]) -> str:
    if not names:
        return text
    pattern = r"(?<![\w$.'\"])(" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) + r")(?![\w$])"
    return re.sub(pattern, lambda m: json.dumps(names[m.group(1)]), text)


def _literal(text: str, concat: str) -> str | None:
    """The value of an argument made only of string literals (and the home mark) joined by `concat`."""
    text = text.strip()
    text = re.sub(r"^(?:File\.join|path\.join|path\.resolve|os\.path\.join|file\.path|joinpath)\s*\((.*)\)$",
                  lambda m: "\x01".join(_split_args(m.group(1))), text, flags=re.S)
    text = re.sub(r"^\(\s*(.*?)\s*\)$", r"\1", text, flags=re.S)
    text = re.sub(r"^(?:glob|Dir\.glob|Dir)\s*[(\[]\s*(.*?)\s*[)\]]$", r"\1", text, flags=re.S)
    pieces, pos = [], 0
    for match in _STRING.finditer(text):
        between = text[pos:match.start()].strip()
        if between and not re.fullmatch(r"(?:" + concat + r"|\x01|,)", between):
            return None
        if between == "\x01" and pieces:
            pieces.append("/")
        value = next((g for g in match.groups() if g is not None), None)
        if value is None and match.group().strip() == _HOME_MARK:
            pieces.append("~")
        elif value is None:
            return None
        elif re.search(r"\$\{|#\{|(?<!\\)\$[A-Za-z_{]", value) and match.group(1) is None:
            return None                                   # interpolation: computed
        else:
            pieces.append(_unescape(value, match.group(1) is not None).replace(_HOME_MARK, "~"))
        pos = match.end()
    if text[pos:].strip() or not pieces:
        return None
    return "".join(pieces)


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "e": "\x1b"}


def _unescape(value: str, single: bool) -> str:
    """A string literal's text: single quotes take \\ and \' only, double quotes the usual escapes."""
    if single:
        return re.sub(r"\\([\\'])", r"\1", value)

    def repl(match: re.Match) -> str:
        esc = match.group(1)
        if esc[0] in "xu" and len(esc) > 1:
            return chr(int(esc[1:].strip("{}"), 16))
        return _ESCAPES.get(esc, esc)

    return re.sub(r"\\(x[0-9a-fA-F]{2}|u\{?[0-9a-fA-F]{1,6}\}?|.)", repl, value, flags=re.S)


def _perl_open(code: str, facts: CodeFacts) -> None:
    """perl open(): `>`/`>>`/`+<` modes write, `|` modes start a program."""
    for match in re.finditer(_R + r"open\b", code):
        args = _call_args(code, match.end(), False)
        values = [_literal(a, r"\.") for a in args]
        literal = [v for v in values[1:] if v is not None]
        mode = literal[0].strip() if literal else ""
        if mode in ("-|", "|-"):
            facts.spawns.append(_command_text(values[2:], args[2:]) if len(values) > 2 else None)
        elif mode.startswith("|") or mode.endswith("|"):
            facts.spawns.append(mode.strip("|").strip() or None)
        elif mode.startswith((">", "+<", "+>")):
            rest = mode.lstrip("+<>").strip()
            facts.writes.append(rest or (values[2] if len(values) > 2 else None))
        elif len(values) > 1 and values[1] is None:
            facts.writes.append(None)                       # a computed mode may write


def _awk_redirects(code: str, facts: CodeFacts) -> None:
    for match in re.finditer(r"(?:print|printf)[^;}\n|>]*(>>?|\|)\s*(\"(?:[^\"\\]|\\.)*\"|[^;}\n]+)", code):
        value = _literal(match.group(2), r"\s")
        if match.group(1) == "|":
            facts.spawns.append(value)
        else:
            facts.writes.append(value)


def _sed(script: str) -> CodeFacts:
    """sed's `e` command and `s///e` flag run programs; `w FILE` (also as an s flag) writes FILE."""
    facts = CodeFacts("sed")
    for line in re.split(r"[;\n]", script):
        line = line.strip()
        command = re.match(r"^(?:\d+|\$|/(?:[^/\\]|\\.)*/)?(?:,(?:\d+|\$|/(?:[^/\\]|\\.)*/))?\s*!?\s*(.)(.*)$", line)
        if not command:
            continue
        op, rest = command.group(1), command.group(2)
        if op == "e":
            facts.spawns.append(rest.strip() or None)
        elif op in ("w", "W"):
            facts.writes.append(rest.strip() or None)
        elif op == "s" and rest:
            delim = rest[0]
            parts = re.split(r"(?<!\\)" + re.escape(delim), rest[1:]) if delim.strip() else []
            if len(parts) >= 3:
                flags = delim.join(parts[2:])
                if "e" in re.sub(r"w.*$", "", flags):
                    facts.spawns.append(None)
                written = re.search(r"w\s*(.+)$", flags)
                if written:
                    facts.writes.append(written.group(1).strip())
    return facts


def _vim(commands: str) -> CodeFacts:
    """vim/ex commands: `!cmd`, `r !cmd`, `w !cmd`, `%!cmd`, `system("...")`, `terminal cmd` run programs."""
    facts = CodeFacts("vim")
    for line in re.split(r"\n|\s\|\s", commands):
        line = line.strip().lstrip(":")
        shell = re.match(r"^(?:[%.,$\d'<>]*\s*)(?:(?:r|read|w|write)\s*)?!(.*)$", line) or \
            re.match(r"^(?:ter|terminal)\s+(.*)$", line)
        if shell:
            facts.spawns.append(shell.group(1).strip() or None)
        for call in re.finditer(r"\b(?:system|systemlist|jobstart|libcall)\s*\(", line):
            args = _call_args(line, call.end() - 1, False)
            facts.spawns.append(_literal(args[0], r"\.") if args else None)
        if re.search(r"\b(?:exe|execute|py3?|python3?|lua|perl|ruby|so|source)\b", line):
            facts.opaque = True
        written = re.match(r"^(?:w|write|sav|saveas|wq|x)!?\s+([^!|\s]\S*)", line)
        if written:
            facts.writes.append(written.group(1))
    return facts


_PWSH_DELETE = {"remove-item", "ri", "rm", "del", "erase", "rd", "rmdir"}
_PWSH_WRITE = {"set-content", "sc", "add-content", "ac", "out-file", "new-item", "ni", "copy-item", "cp", "copy",
               "cpi", "move-item", "mv", "mi", "move", "clear-content"}
_PWSH_SPAWN = {"start-process", "saps", "start", "invoke-item", "ii", "cmd", "bash", "sh", "wsl"}
_PWSH_OPAQUE = {"invoke-expression", "iex", "invoke-command", "icm", "add-type"}


def _pwsh(code: str) -> CodeFacts:
    """PowerShell: cmdlets and their aliases, judged like the shell commands they match."""
    facts = CodeFacts("pwsh")
    code = re.sub(r"\$env:(?:HOME|USERPROFILE)|\$HOME|\[Environment\]::GetFolderPath\([^)]*\)", "~", code,
                  flags=re.I)
    if re.search(r"FromBase64String|-enc(?:odedcommand)?\b|\[scriptblock\]::Create", code, re.I):
        facts.opaque = True
    for statement in re.split(r"[;\n|]", code):
        try:
            words = shlex.split(statement)
        except ValueError:
            words = statement.split()
        if not words:
            continue
        name = words[0].lstrip("&").lower()
        operands = [w for i, w in enumerate(words[1:], 1) if not w.startswith("-") or
                    (i > 1 and words[i - 1].lower() in ("-path", "-literalpath", "-destination", "-filepath"))]
        operands = [w for w in operands if not w.startswith("-")]
        if name in _PWSH_OPAQUE:
            facts.opaque = True
        elif name in _PWSH_DELETE:
            facts.deletes.extend(operands or [None])
        elif name in _PWSH_WRITE:
            facts.writes.append(operands[-1] if operands else None)
        elif name in _PWSH_SPAWN:
            facts.spawns.append(" ".join(operands) if operands else None)
    return facts
