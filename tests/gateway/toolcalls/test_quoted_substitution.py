"""A `$(...)` or backquote inside single quotes is literal: it runs only when a nested shell reads the text.
Expanding it in the outer word (when single-quoted parts are joined with `"'"` parts, as `shlex.quote` writes a
quote) corrupted the nested script, and `bash -c 'sh <<< ...eval "$(echo ...rm -rf ~...)"...'` was allowed.
Found by tests/gateway/toolcalls/test_corpus.py::test_wrapping_never_allows (hypothesis)."""
from __future__ import annotations

import shlex

import pytest

from gateway.toolcalls.shell import parse_shell
from tests.gateway.toolcalls.corpus import evaluator, run_entry
from tests.gateway.toolcalls.test_corpus import WRAPPABLE, WRAPPERS

SUBSTITUTING = [c for c in WRAPPABLE if "$(" in c or "`" in c]
# the wrappers that put a command inside a quoted word read again by a nested shell
OUTER = [lambda c: f"bash -c {shlex.quote(c)}", lambda c: f"busybox sh -c {shlex.quote(c)}",
         lambda c: f"sh <<< {shlex.quote(c)}", lambda c: f"X={shlex.quote(c)}; eval \"$X\""]


@pytest.fixture(scope="module")
def ev():
    return evaluator()


def test_a_concatenation_of_single_quoted_parts_and_quote_characters_is_literal():
    word = shlex.quote("""eval "$(echo 'rm -rf ~')\"""")
    assert "'\"'\"'" in word                          # shlex.quote's spelling of a quote inside quotes
    cmd = parse_shell(f"bash -c {word}")["commands"][0]
    assert cmd["argv"][2] == """eval "$(echo 'rm -rf ~')\""""
    assert cmd["quoting"][2] == "single"


def test_a_literal_dollar_beside_an_expanding_part_is_not_guessed():
    """`'$(echo a)'"$HOME"` would need expanding part by part: the facts say unparsed (the policy asks)."""
    parsed = parse_shell("""bash -c '$(echo a) '"$HOME"''""")
    assert parsed["parsed"] is False


def test_a_single_quoted_assignment_keeps_its_text():
    parsed = parse_shell("""X='$(echo a)'"'"'b'; eval "$X\"""")
    assign = parsed["commands"][0]
    assert assign["assign"] == {"X": ["$(echo a)'b"]} and assign["literal"] == ["X"]


@pytest.mark.parametrize("outer", range(len(OUTER)))
def test_no_wrapper_inside_a_quoting_wrapper_hides_a_substituted_wipe(ev, outer):
    missed = []
    for command in SUBSTITUTING:
        for inner in WRAPPERS:
            wrapped = OUTER[outer](inner(command))
            if run_entry(ev, {"cmd": wrapped})[0]["action"] == "allow":
                missed.append(wrapped)
    assert SUBSTITUTING and not missed, missed
