"""Static word expansion: braces, variables known from earlier in the line, literal command substitutions."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.toolcalls.expand import MAX_CANDIDATES, USER, expand_braces, expand_word, substitute


@pytest.mark.parametrize("word, expected", [
    ("{a,b}", ["a", "b"]),
    ("x{a,b}y", ["xay", "xby"]),
    ("{/,~}", ["/", "~"]),
    ("/{bin,etc}", ["/bin", "/etc"]),
    ("{a,{b,c}}", ["a", "b", "c"]),
    ("{rm,-rf}", ["rm", "-rf"]),
    ("{1..3}", ["1", "2", "3"]),
    ("{a..c}", ["a", "b", "c"]),
    ("{3..1}", ["3", "2", "1"]),
    ("{a}", ["{a}"]),
    ("${HOME}", ["${HOME}"]),
    ("{}", ["{}"]),
    ("x{", ["x{"]),
    ("{1..100000}", ["{1..100000}"]),
    ("{a,b}{c,d}", ["ac", "ad", "bc", "bd"]),
])
def test_expand_braces(word, expected):
    assert expand_braces(word) == expected


def test_brace_explosion_is_bounded():
    word = "{a,b}" * 10
    assert expand_braces(word) == [word]


@pytest.mark.parametrize("word, variables, cwd, expected", [
    ("$X", {"X": ["/"]}, "/w", ["/"]),
    ("${X}/y", {"X": ["/a", "/b"]}, "/w", ["/a/y", "/b/y"]),
    ("$UNKNOWN", {"X": ["/"]}, "/w", ["$UNKNOWN"]),
    ("$1", {"1": ["~"]}, "/w", ["~"]),
    ("$(pwd)/x", {}, "/tmp", ["/tmp/x"]),
    ("`pwd`", {}, "/tmp", ["/tmp"]),
    ("$(pwd)", {}, None, ["$(pwd)"]),
    ("$(echo ~)", {}, "/w", ["~"]),
    ("/home/$USER", {}, "/w", [f"/home/{USER}"]),
    ("/home/$(whoami)", {}, "/w", [f"/home/{USER}"]),
    ("${HOME:-/tmp}", {}, "/w", ["~"]),
    ("${HOME%/}", {}, "/w", ["~"]),
    ("${HOME%/*}", {}, "/w", ["~/.."]),
    ("~/x", {"HOME": ["/"]}, "/w", ["//x"]),
])
def test_substitute(word, variables, cwd, expected):
    assert substitute(word, variables, cwd) == expected


def test_whole_word_variable_with_blanks_also_splits():
    assert expand_word("$X", {"X": ["-rf /"]}, "/w") == ["-rf /", "-rf", "/"]
    assert expand_word("a$X", {"X": ["-rf /"]}, "/w") == ["a-rf /"]


def test_variables_and_braces_combine():
    assert expand_word("$D/{a,b}", {"D": ["/x"]}, "/w") == ["/x/a", "/x/b"]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="{}$,.a1~/()` ", max_size=40),
       st.dictionaries(st.sampled_from(["X", "1", "HOME", "@"]), st.lists(st.text(max_size=5), max_size=3)))
def test_expand_word_never_raises_and_is_bounded(word, variables):
    out = expand_word(word, variables, "/w")
    assert 1 <= len(out) <= MAX_CANDIDATES
    assert all(isinstance(w, str) for w in out)


def _substitute_in_full(word, variables, cwd):
    """substitute() without its shortcut for words holding no `$`, backquote or leading `~`: every rewrite run."""
    import itertools

    from gateway.toolcalls import expand as x
    word = x._USER_FORMS.sub(USER, word)
    if "HOME" in variables and x.re.match(r"~(?=/|$)", word):
        word = "$HOME" + word[1:]
    word = x._HOME_SAME.sub("~", x._HOME_PARENT.sub("~/..", word))
    if cwd is not None:
        word = x._PWD_FORMS.sub(lambda _m: cwd, word)
    word = x._SUBSTITUTION.sub(x._literal_output, word)
    if "$" not in word or not variables:
        return [word]
    pieces, pos = [], 0
    for match in x._VAR.finditer(word):
        name = match.group(1) or match.group(2)
        if name in variables:
            pieces += [[word[pos:match.start()]], variables[name] or [""]]
            pos = match.end()
    if not pieces:
        return [word]
    out = []
    for combo in itertools.product(*pieces, [word[pos:]]):
        if sum(len(p) for p in combo) > x.MAX_WORD:
            return [word]
        out.append("".join(combo))
        if len(out) > MAX_CANDIDATES:
            return [word]
    return out


@settings(max_examples=300)
@given(st.text(alphabet="~/$`{}()aHOMEUSpwd -_.", max_size=24),
       st.dictionaries(st.sampled_from(["HOME", "X", "a", "USER"]), st.lists(st.sampled_from(["/", "~", "b"]),
                                                                             max_size=2), max_size=3),
       st.none() | st.just("/work"))
def test_substitute_is_every_rewrite_in_turn(word, variables, cwd):
    assert substitute(word, variables, cwd) == _substitute_in_full(word, variables, cwd)
