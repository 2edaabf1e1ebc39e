"""Interpreters' code: where it comes from (code_source) and what it does (Python by ast, others by scanning)."""
from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.toolcalls.interpreters import analyze, code_source, language_of_script
from gateway.toolcalls.pycode import analyze_python
from gateway.toolcalls.scriptscan import analyze_script


def facts(language: str, code: str) -> dict:
    """The non-empty fields of the CodeFacts."""
    got = analyze(language, code)
    return {k: v for k, v in vars(got).items() if v and k not in ("language", "parsed")}


# -- python ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("code, expected", [
    ("print(1)", {}),
    ("import json,sys; print(json.load(sys.stdin))", {}),
    ("x = open('f').read()", {}),
    ("import shutil; shutil.rmtree('/')", {"deletes": ["/"]}),
    ("import shutil, os; shutil.rmtree(os.path.expanduser('~'))", {"deletes": ["~"]}),
    ("from pathlib import Path; import shutil; shutil.rmtree(Path.home())", {"deletes": ["~"]}),
    ("import os; d = os.environ['HOME']; os.rmdir(d)", {"deletes": ["~"]}),
    ("import os; os.remove(os.path.join(os.getenv('HOME'), '.bashrc'))", {"deletes": ["~/.bashrc"]}),
    ("from pathlib import Path; (Path.home() / 'x').unlink()", {"deletes": ["~/x"]}),
    ("import os\nfor f in os.listdir('/'):\n    os.remove(f)", {"deletes": ["/*"]}),
    ("import glob, os\n[os.remove(f) for f in glob.glob('/etc/*')]", {"deletes": ["/etc/*"]}),
    ("import os; os.remove(input())", {"deletes": [None]}),
    ("import os; os.system('rm -rf ~')", {"spawns": ["rm -rf ~"]}),
    ("import subprocess; subprocess.run(['rm', '-rf', '/'])", {"spawns": ["rm -rf /"]}),
    ("import subprocess as s; s.call('rm -rf /', shell=True)", {"spawns": ["rm -rf /"]}),
    ("from os import system as s; s('rm -rf /')", {"spawns": ["rm -rf /"]}),
    ("from subprocess import *; check_output(['rm', 'x'])", {"spawns": ["rm x"]}),
    ("__import__('os').system('rm -rf ~')", {"spawns": ["rm -rf ~"]}),
    ("import importlib; importlib.import_module('os').system('ls')", {"spawns": ["ls"]}),
    ("getattr(__import__('os'), 'system')('rm -rf ~')", {"spawns": ["rm -rf ~"]}),
    ("import os; os.execvp('rm', ['rm', '-rf', '/'])", {"spawns": ["rm -rf /"]}),
    ("import os; os.execl('/bin/rm', 'rm', '-rf', '/')", {"spawns": ["rm -rf /"]}),
    ("import pty; pty.spawn('/bin/sh')", {"spawns": ["/bin/sh"]}),
    ("import os; os.popen(cmd)", {"spawns": [None]}),
    ("import asyncio; asyncio.create_subprocess_exec('rm', '-rf', '/')", {"spawns": ["rm -rf /"]}),
    ("exec('import os; os.system(\"rm -rf ~\")')", {"spawns": ["rm -rf ~"]}),
    ("open('out.txt', 'w').write('x')", {"writes": ["out.txt"]}),
    ("open('/etc/hosts', mode='a')", {"writes": ["/etc/hosts"]}),
    ("open(p, m)", {"writes": [None]}),
    ("from pathlib import Path; Path('/etc/passwd').write_text('x')", {"writes": ["/etc/passwd"]}),
    ("import shutil; shutil.copy('a', '/usr/bin/a')", {"writes": ["/usr/bin/a"]}),
    ("import os; os.rename('/etc/passwd', 'p')", {"moves": ["/etc/passwd"], "writes": ["p"]}),
    ("import os; os.symlink('/', 'root')", {"links": [("/", "root")]}),
    ("import requests; requests.post('https://x.test', data=1)", {"http": [("POST", "https://x.test")]}),
    ("import urllib.request as u; u.urlopen('https://x.test', data=b'1')", {"http": [("POST", "https://x.test")]}),
])
def test_python(code, expected):
    assert facts("python", code) == expected


@pytest.mark.parametrize("code", [
    "exec(__import__('base64').b64decode('cHJpbnQoMSk='))", "eval(input())", "import ctypes",
    "from ctypes import CDLL", "import pickle; pickle.loads(b)", "__import__(name)", "getattr(os, n)()",
    "import codecs; exec(codecs.decode('x', 'rot13'))", "import marshal; marshal.loads(b)",
])
def test_python_computed_code_is_opaque(code):
    assert analyze_python(code).opaque is True


@pytest.mark.parametrize("code", ["print 1", "def (:", "x" * 100_001, "(" * 300 + ")" * 300])
def test_python_that_does_not_parse(code):
    assert analyze_python(code).parsed is False


# -- other languages ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("language, code, expected", [
    ("perl", "print 1", {}),
    ("perl", "system('rm -rf ~')", {"spawns": ["rm -rf ~"]}),
    ("perl", "exec 'rm', '-rf', '/'", {"spawns": ["rm -rf /"]}),
    ("perl", "`rm -rf /`", {"spawns": ["rm -rf /"]}),
    ("perl", "qx{rm -rf /}", {"spawns": ["rm -rf /"]}),
    ("perl", "use File::Path; rmtree($ENV{HOME})", {"deletes": ["~"]}),
    ("perl", "unlink glob('/*')", {"deletes": ["/*"]}),
    ("perl", "open(my $f, '>', '/etc/passwd')", {"writes": ["/etc/passwd"]}),
    ("perl", "open(F, '| rm -rf ~')", {"spawns": ["rm -rf ~"]}),
    ("ruby", "puts 1", {}),
    ("ruby", "require 'fileutils'; FileUtils.rm_rf(Dir.home)", {"deletes": ["~"]}),
    ("ruby", "system('rm', '-rf', '/')", {"spawns": ["rm -rf /"]}),
    ("ruby", "%x(rm -rf /)", {"spawns": ["rm -rf /"]}),
    ("ruby", "system(\"rm -rf #{Dir.home}\")", {"spawns": ["rm -rf ~"]}),
    ("js", "console.log(1)", {}),
    ("js", "console.log(/a/.exec('abc'))", {}),
    ("js", "require('fs').rmSync(require('os').homedir(), {recursive: true})", {"deletes": ["~"]}),
    ("js", "require('fs').rmSync(process.env.HOME + '/x')", {"deletes": ["~/x"]}),
    ("js", "require('child_process').execSync('rm -rf ~')", {"spawns": ["rm -rf ~"]}),
    ("js", "const cp = require('child_process'); cp.spawnSync('rm', ['-rf', '/'])", {"spawns": ["rm -rf /"]}),
    ("js", "const {execSync} = require('child_process'); execSync(`rm -rf ${require('os').homedir()}`)",
     {"spawns": ["rm -rf ~"]}),
    ("js", "Deno.remove('/', {recursive: true})", {"deletes": ["/"]}),
    ("js", "fs.writeFileSync('out.txt', 'x')", {"writes": ["out.txt"]}),
    ("php", "echo 1;", {}),
    ("php", "system('rm -rf ~');", {"spawns": ["rm -rf ~"]}),
    ("php", "unlink(getenv('HOME') . '/.bashrc');", {"deletes": ["~/.bashrc"]}),
    ("lua", "os.execute('rm -rf ~')", {"spawns": ["rm -rf ~"]}),
    ("r", "unlink('~', recursive=TRUE)", {"deletes": ["~"]}),
    ("julia", "run(`rm -rf /`)", {"spawns": ["rm -rf /"]}),
    ("applescript", 'do shell script "rm -rf ~"', {"spawns": ["rm -rf ~"]}),
    ("awk", "{print $1}", {}),
    ("awk", 'BEGIN{system("rm -rf ~")}', {"spawns": ["rm -rf ~"]}),
    ("awk", '{print > "/etc/x"}', {"writes": ["/etc/x"]}),
    ("awk", '{print | "sh"}', {"spawns": ["sh"]}),
    ("sed", "s/a/b/", {}),
    ("sed", "1e rm -rf ~", {"spawns": ["rm -rf ~"]}),
    ("sed", "s/x/y/e", {"spawns": [None]}),
    ("sed", "s/x/y/w /etc/out", {"writes": ["/etc/out"]}),
    ("vim", ":!rm -rf ~", {"spawns": ["rm -rf ~"]}),
    ("vim", "call system('rm -rf ~')", {"spawns": ["rm -rf ~"]}),
    ("vim", "%!sh", {"spawns": ["sh"]}),
    ("gdb", "shell rm -rf ~", {"spawns": ["rm -rf ~"]}),
    ("gdb", "python import os; os.system('rm -rf ~')", {"spawns": ["rm -rf ~"]}),
    ("elisp", '(shell-command "rm -rf ~")', {"spawns": ["rm -rf ~"]}),
    ("tcl", "exec rm -rf ~", {"spawns": ["rm -rf ~"]}),
    ("pwsh", "Remove-Item -Recurse -Force $HOME", {"deletes": ["~"]}),
    ("pwsh", "Write-Output 1", {}),
])
def test_script_languages(language, code, expected):
    assert facts(language, code) == expected


@pytest.mark.parametrize("language, code", [
    ("perl", "eval $x"), ("ruby", "eval(x)"), ("js", "eval(Buffer.from(x, 'base64').toString())"),
    ("js", "new Function(x)()"), ("php", "eval(base64_decode('x'));"), ("php", "$f('x');"),
    ("lua", "load(x)()"), ("pwsh", "iex $x"), ("pwsh", "-EncodedCommand AAAA"),
])
def test_script_computed_code_is_opaque(language, code):
    assert analyze(language, code).opaque is True


# -- where code comes from ---------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, expected", [
    (["python3", "-c", "print(1)"], ("python", "print(1)", None, False)),
    (["python3", "-Sc", "x"], ("python", "x", None, False)),
    (["python3.12", "-I", "-c", "x"], ("python", "x", None, False)),
    (["python3", "x.py", "a"], ("python", None, "x.py", False)),
    (["python3"], ("python", None, None, True)),
    (["python3", "-"], ("python", None, None, True)),
    (["node", "-e", "1"], ("js", "1", None, False)),
    (["node", "--eval=1"], ("js", "1", None, False)),
    (["node", "-p", "1"], ("js", "1", None, False)),
    (["node", "x.js"], ("js", None, "x.js", False)),
    (["perl", "-e", "a", "-e", "b"], ("perl", "a\nb", None, False)),
    (["perl", "-lne", "print", "f"], ("perl", "print", None, False)),
    (["ruby", "-e", "puts 1"], ("ruby", "puts 1", None, False)),
    (["php", "-r", "echo 1;"], ("php", "echo 1;", None, False)),
    (["deno", "eval", "1"], ("js", "1", None, False)),
    (["bun", "-e", "1"], ("js", "1", None, False)),
    (["bun", "x.ts"], ("js", None, "x.ts", False)),
    (["lua", "-e", "x"], ("lua", "x", None, False)),
    (["Rscript", "-e", "1"], ("r", "1", None, False)),
    (["osascript", "-e", "x"], ("applescript", "x", None, False)),
    (["osascript", "-l", "JavaScript", "-e", "x"], ("jxa", "x", None, False)),
    (["awk", "-F:", "{print $1}", "/etc/passwd"], ("awk", "{print $1}", None, False)),
    (["awk", "-f", "x.awk", "f"], ("awk", None, "x.awk", False)),
    (["sed", "-n", "-e", "p", "f"], ("sed", "p", None, False)),
    (["vim", "+!ls"], ("vim", "!ls", None, False)),
    (["gdb", "-batch", "-ex", "shell ls"], ("gdb", "shell ls", None, False)),
    (["pwsh", "-Command", "Remove-Item x"], ("pwsh", "Remove-Item x", None, False)),
])
def test_code_source(argv, expected):
    source = code_source(argv[0], argv)
    assert (source.language, source.inline, source.script, source.stdin) == expected


@pytest.mark.parametrize("argv", [["python3", "--version"], ["python3", "-m", "pytest"], ["node", "-v"],
                                  ["deno", "fmt"], ["bun", "install"], ["bun", "run", "build"], ["ls"], ["npm", "test"]])
def test_no_inline_code(argv):
    source = code_source(argv[0], argv)
    assert source is None or (source.inline is None and source.script is None and not source.stdin)


def test_in_place_edits_and_remote_code():
    assert code_source("sed", ["sed", "-i", "s/a/b/", "f"]).in_place is True
    assert code_source("perl", ["perl", "-pi", "-e", "s/a/b/", "f"]).files == ("f",)
    assert code_source("gawk", ["gawk", "-i", "inplace", "{}", "f"]).in_place is True
    assert code_source("deno", ["deno", "run", "-A", "https://x.test/a.ts"]).remote is True


@pytest.mark.parametrize("path, content, expected", [
    ("x.sh", "#!/bin/bash\n", "shell"), ("x", "#!/usr/bin/env python3\n", "python"),
    ("x", "#!/usr/bin/env -S node --x\n", "js"), ("x.py", None, "python"), ("x.rb", "puts 1", "ruby"),
    ("x", "echo hi", "shell"), ("x.txt", None, "shell"),
])
def test_language_of_script(path, content, expected):
    assert language_of_script(path, content, "shell") == expected


LANGUAGES = ["python", "perl", "ruby", "js", "php", "lua", "r", "julia", "applescript", "jxa", "awk", "sed",
             "vim", "elisp", "gdb", "tcl", "pwsh"]
CODEISH = st.lists(st.sampled_from(["system(", "exec(", "'rm -rf ~'", '"', "'", "`", "(", ")", "[", "]", "{", "}",
                                    ",", ";", "\n", "import os", "os.system", "eval", "$ENV{HOME}", "unlink",
                                    "require('fs').rmSync(", "qx{", "%x(", "+", ".", "..", "#{", "${", "\\",
                                    "open(", "'>'", "'|'", "1e ", "s/a/b/e", ":!", "!"]), max_size=30).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(LANGUAGES), st.one_of(CODEISH, st.text(max_size=200)))
def test_analysers_never_raise_and_stay_fast(language, code):
    started = time.thread_time()
    result = analyze(language, code)
    elapsed = time.thread_time() - started
    assert isinstance(result.parsed, bool) and isinstance(result.opaque, bool)
    assert all(s is None or isinstance(s, str) for s in result.spawns)
    assert elapsed < 0.05 or min(_timed(language, code) for _ in range(3)) < 0.05


def _timed(language: str, code: str) -> float:
    started = time.thread_time()
    analyze(language, code)
    return time.thread_time() - started


def test_script_scanner_unknown_language():
    assert analyze_script("cobol", "x").parsed is False


def test_python_os_walk_loops():
    code = "import os\nfor root, dirs, files in os.walk('/'):\n    for f in files:\n        os.remove(os.path.join(root, f))"
    assert analyze_python(code).deletes == ["/*"]


def test_string_escapes_in_spawned_commands():
    assert analyze("perl", 'system("r\\\\m -rf ~")').spawns == ["r\\m -rf ~"]
    assert analyze("js", "require('child_process').execSync(\"printf 'a\\\\nb'\")").spawns == ["printf 'a\\nb'"]
    assert analyze("ruby", "system('it\\'s')").spawns == ["it's"]


def test_perl_quote_operators_and_variables():
    assert analyze("perl", "system qq{rm -rf /}").spawns == ["rm -rf /"]
    assert analyze("perl", "my $c = 'rm -rf ~'; system($c)").spawns == ["rm -rf ~"]
    assert analyze("awk", 'BEGIN {cmd = "rm -rf ~"; system(cmd)}').spawns == ["rm -rf ~"]
    assert analyze("js", "const c = 'rm -rf /'; require('child_process').execSync(c)").spawns == ["rm -rf /"]
