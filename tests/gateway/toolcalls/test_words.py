"""Shell word helpers: unquoting bare, double-quoted and $'...' text, and the forgiving shlex split."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.toolcalls.words import ansi_c, split_words, unescape_dq, unescape_word


@pytest.mark.parametrize("text, expected", [
    ("plain", "plain"),
    ("a\\ b", "a b"),
    ("\\$HOME", "$HOME"),
    ("\\\\", "\\"),
    ("\\n", "n"),
    ("a\\\nb", "a\nb"),
    ("~/x", "~/x"),
])
def test_unescape_word(text, expected):
    assert unescape_word(text) == expected


@pytest.mark.parametrize("text, expected", [
    ('\\"x\\"', '"x"'),
    ("\\$HOME", "$HOME"),
    ("\\`id\\`", "`id`"),
    ("\\\\", "\\"),
    ("\\n", "\\n"),         # only \ " $ ` are escapable inside double quotes
    ("a\\ b", "a\\ b"),
])
def test_unescape_dq(text, expected):
    assert unescape_dq(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("a\\tb\\x41", "a\tbA"),
    ("\\n\\r\\a\\b\\f\\v", "\n\r\a\b\f\v"),
    ("\\e\\E", "\x1b\x1b"),
    ("\\101", "A"),
    ("\\u00e9", "\u00e9"),
    ("\\U0001F600", "\U0001F600"),
    ("\\'", "'"),
    ("\\q", "q"),
    ("\\x", "x"),               # no hex digits: the letter itself
    ("\\UFFFFFFFF", ""),         # beyond Unicode: dropped, never raises
])
def test_ansi_c(text, expected):
    assert ansi_c(text) == expected


@pytest.mark.parametrize("text, expected", [
    ('a "b c" d', ["a", "b c", "d"]),
    ("rm -rf 'x y'", ["rm", "-rf", "x y"]),
    ('a "unbalanced', ["a", '"unbalanced']),   # shlex fails: plain whitespace split
    ("", []),
])
def test_split_words(text, expected):
    assert split_words(text) == expected


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_word_helpers_never_raise(text):
    for helper in (ansi_c, unescape_dq, unescape_word):
        assert isinstance(helper(text), str)
    assert all(isinstance(w, str) for w in split_words(text))


@settings(max_examples=200)
@given(st.text(alphabet='\\"$`ab \n', max_size=20))
def test_unescaping_is_the_substitution_for_any_text(text):
    """The shortcut for text with no backslash returns what the substitution returns."""
    import re
    assert unescape_word(text) == re.sub(r"\\(.)", r"\1", text, flags=re.S)
    assert unescape_dq(text) == re.sub(r'\\([\\"$`])', r"\1", text)
