"""Known output of echo, printf and base64 -d."""
from __future__ import annotations

import pytest

from gateway.toolcalls.streams import base64_text, echo_text, printf_text


@pytest.mark.parametrize("argv, text", [
    (["echo", "a", "b"], "a b\n"), (["echo", "-n", "x"], "x"), (["echo", "-e", "a\\nb"], "a\nb\n"),
    (["echo", "-ne", "a\\tb"], "a\tb"), (["echo"], "\n"),
])
def test_echo(argv, text):
    assert echo_text(argv) == text


@pytest.mark.parametrize("argv, text", [
    (["printf", "rm -rf %s\\n", "~"], "rm -rf ~\n"), (["printf", "%s\\n", "a", "b"], "a\nb\n"),
    (["printf", "100%%"], "100%"), (["printf", "-v", "x", "y"], None), (["printf"], None),
    (["printf", "%b", "a\\nb"], "a\nb"),
])
def test_printf(argv, text):
    assert printf_text(argv) == text


def test_base64():
    assert base64_text("cm0gLXJmIH4=\n") == "rm -rf ~"
    assert base64_text("not base64!") is None
    assert base64_text("//79") is None
