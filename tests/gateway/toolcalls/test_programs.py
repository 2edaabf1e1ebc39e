"""programs_run: programs started through configuration, environment or options."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.toolcalls.programs import env_programs, git_config, programs_run


@pytest.mark.parametrize("argv, env, sub, expected", [
    (["git", "-c", "core.pager=rm -rf ~", "log"], {}, "log", [("git config core.pager", "rm -rf ~")]),
    (["git", "-c", "alias.st=!rm -rf ~", "st"], {}, "st", [("git config alias.st", "rm -rf ~")]),
    (["git", "-c", "alias.st=clean -fdx", "st"], {}, "st", [("git config alias.st", "git clean -fdx")]),
    (["git", "-c", "alias.st=!x", "log"], {}, "log", []),
    (["git", "-c", "core.fsmonitor=true", "status"], {}, "status", []),
    (["git", "-c", "core.fsmonitor=./hook", "status"], {}, "status", [("git config core.fsmonitor", "./hook")]),
    (["git", "-c", "credential.helper=store", "fetch"], {}, "fetch", []),
    (["git", "-c", "credential.helper=!curl x", "fetch"], {}, "fetch", [("git config credential.helper", "curl x")]),
    (["git", "-c", "core.hooksPath=/tmp/h", "commit"], {}, "commit", [("git config core.hookspath", None)]),
    (["git", "-c", "include.path=/tmp/c", "log"], {}, "log", [("git config include.path", None)]),
    (["git", "-c", "filter.x.clean=sh", "add", "."], {}, "add", [("git config filter.x.clean", "sh")]),
    (["git", "-c", "user.name=x", "commit"], {}, "commit", []),
    (["git", "--config-env=core.pager=P", "log"], {}, "log", [("git config core.pager", None)]),
    (["git", "--config-env=core.pager=P", "log"], {"P": "less"}, "log", [("git config core.pager", None)]),
    (["git", "status"], {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.fsmonitor",
                         "GIT_CONFIG_VALUE_0": "rm -rf ~"}, "status", [("git config core.fsmonitor", "rm -rf ~")]),
    (["git", "log"], {"GIT_CONFIG_PARAMETERS": "'core.pager'='rm -rf ~'"}, "log",
     [("git config core.pager", "rm -rf ~")]),
    (["git", "rebase", "--exec=make", "main"], {}, "rebase", [("git rebase --exec", "make")]),
    (["git", "bisect", "run", "rm", "-rf", "~"], {}, "bisect", [("git bisect run", "rm -rf '~'")]),
    (["git", "submodule", "foreach", "rm", "-rf", "."], {}, "submodule", [("git submodule foreach", "rm -rf .")]),
    (["git", "clone", "-u", "rm x", "h:r"], {}, "clone", [("git clone -u", "rm x")]),
    (["git", "clone", "ext::sh -c rm% -rf% ~"], {}, "clone", [("git ext:: transport", "sh -c rm -rf ~")]),
    (["git", "clone", "--template=/tmp/t", "h:r"], {}, "clone", [("git clone --template", None)]),
])
def test_git(argv, env, sub, expected):
    assert programs_run("git", argv, env, sub) == expected


@pytest.mark.parametrize("env, expected", [
    ({"PAGER": "rm -rf ~"}, [("$PAGER", "rm -rf ~")]),
    ({"LESSOPEN": "| x %s"}, [("$LESSOPEN", "x FILE")]),
    ({"LD_PRELOAD": "/tmp/x.so"}, [("$LD_PRELOAD", None)]),
    ({"NODE_OPTIONS": "--require /tmp/x.js"}, [("$NODE_OPTIONS", None)]),
    ({"NODE_OPTIONS": "--max-old-space-size=4096"}, []),
    ({"BASH_FUNC_ls%%": "() { rm -rf ~; }"}, [("$BASH_FUNC_ls%%", " rm -rf ~; ")]),
    ({"PATH": "/usr/bin", "HOME": "/x", "LANG": "C"}, []),
])
def test_env(env, expected):
    assert env_programs(env) == expected


@pytest.mark.parametrize("name, argv, expected", [
    ("rg", ["rg", "--pre=x", "p"], [("rg --pre", "x")]),
    ("man", ["man", "-Px", "ls"], [("man -P", "x")]),
    ("tar", ["tar", "--use-compress-program=x", "-cf", "a"], [("tar --use-compress-program", "x")]),
    ("tar", ["tar", "--checkpoint-action=exec=x", "-cf", "a"], [("tar --checkpoint-action", "x")]),
    ("zip", ["zip", "-T", "-TT", "x", "a.zip", "f"], [("zip -TT", "x")]),
    ("fzf", ["fzf", "--preview", "x {}"], [("fzf --preview", "x {}")]),
    ("scp", ["scp", "-S", "x", "a", "h:b"], [("scp -S", "x")]),
    ("ssh", ["ssh", "-oLocalCommand=x", "h"], [("ssh -o LocalCommand", "x")]),
    ("ssh", ["ssh", "-o", "ProxyCommand=none", "h"], []),
    ("screen", ["screen", "-dmS", "s", "rm", "-rf", "~"], [("screen", "rm -rf '~'")]),
    ("tmux", ["tmux", "send-keys", "-t", "0", "rm -rf ~", "Enter"], [("tmux send-keys", "rm -rf ~")]),
    ("ls", ["ls", "-la"], []),
])
def test_options(name, argv, expected):
    assert programs_run(name, argv, {}) == expected


def test_git_config_pairs():
    assert git_config(["git", "-c", "a.b", "-ccore.x=1", "--config=c.d=2", "x"], {}) == [
        ("a.b", "true"), ("core.x", "1"), ("c.d", "2")]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=12), max_size=8),
       st.dictionaries(st.sampled_from(["GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0", "PAGER",
                                        "GIT_CONFIG_PARAMETERS", "NODE_OPTIONS", "LESSOPEN"]), st.text(max_size=12)))
def test_never_raises(words, env):
    for name in ("git", "tar", "ssh", "tmux", "screen", "rg"):
        for via, text in programs_run(name, [name] + words, env, words[0] if words else ""):
            assert isinstance(via, str) and (text is None or isinstance(text, str))
