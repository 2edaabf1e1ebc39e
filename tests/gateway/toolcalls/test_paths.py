"""describe_path: anchoring, normalising, home and root, globs judged where they expand, devices, links."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.toolcalls.paths import PATH_KEYS, describe_path, follow_links, resolve_path

WS = "/workspace"


def flags_of(info: dict) -> tuple:
    return (info["normalized"], info["in_workspace"], info["is_root"], info["is_home"], info["is_workspace_parent"],
            info["dynamic"])


# -- anchoring and normalising ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("raw, cwd, expected", [
    ("a.txt", WS, ("/workspace/a.txt", True, False, False, False, False)),
    ("build/", WS, ("/workspace/build", True, False, False, False, False)),
    (".", WS, ("/workspace", True, False, False, False, False)),
    ("..", WS, ("/", False, True, False, True, False)),
    ("../..", WS, ("/", False, True, False, True, False)),
    ("../x", WS, ("/x", False, False, False, False, False)),
    ("/", WS, ("/", False, True, False, True, False)),
    ("//", WS, ("/", False, True, False, True, False)),
    ("/workspace/../etc", WS, ("/etc", False, False, False, False, False)),
    ("/workspace2", WS, ("/workspace2", False, False, False, False, False)),
    ("*", "/", ("/*", False, True, False, True, False)),
    ("*", WS, ("/workspace/*", True, False, False, False, False)),
    ("~", WS, ("~", False, False, True, False, False)),
    ("~/", WS, ("~", False, False, True, False, False)),
    ("~/x", WS, ("~/x", False, False, False, False, False)),
    ("~/x/..", WS, ("~", False, False, True, False, False)),
    ("$HOME", WS, ("~", False, False, True, False, False)),
    ("${HOME}", WS, ("~", False, False, True, False, False)),
    ("${HOME}/", WS, ("~", False, False, True, False, False)),
    ("~bob", WS, ("~bob", False, False, True, False, False)),
    ("/root", WS, ("/root", False, False, True, False, False)),
    ("/home/bob/", WS, ("/home/bob", False, False, True, False, False)),
    ("/home/bob/x", WS, ("/home/bob/x", False, False, False, False, False)),
    ("$PWD/x", WS, ("/workspace/x", True, False, False, False, False)),
    ("$X/y", WS, ("", False, False, False, False, True)),
    ("$(pwd)", WS, ("", False, False, False, False, True)),
    ("a", None, ("", False, False, False, False, True)),
    ("/etc/x", None, ("/etc/x", False, False, False, False, False)),
    ("", WS, ("", False, False, False, False, True)),
    ("x", "~/proj", ("~/proj/x", False, False, False, False, False)),
])
def test_describe_path(raw, cwd, expected):
    info = describe_path(raw, cwd, WS)
    assert tuple(info) == PATH_KEYS
    assert info["raw"] == raw
    assert flags_of(info) == expected


def test_home_relative_path_is_unknown_when_the_workspace_is_in_a_home():
    assert describe_path("~/proj/x", "/home/u/proj", "/home/u/proj")["dynamic"] is True
    assert describe_path("~", "/home/u/proj", "/home/u/proj")["is_home"] is True
    assert describe_path("/home/u", "/home/u/proj", "/home/u/proj")["is_workspace_parent"] is True


def test_glob_flag():
    assert describe_path("*.py", WS, WS)["glob"] is True
    assert describe_path("a.py", WS, WS)["glob"] is False




@pytest.mark.parametrize("raw, cwd, expected", [
    ("/*", WS, ("/*", False, True, False, True, False)),
    ("/h*", WS, ("/h*", False, True, False, True, False)),
    ("/work*", WS, ("/work*", False, True, False, True, False)),
    ("~/*", WS, ("~/*", False, False, True, False, False)),
    ("~/.*", WS, ("~/.*", False, False, True, False, False)),
    ("~/.cache/*", WS, ("~/.cache/*", False, False, False, False, False)),
    ("/workspace/*", WS, ("/workspace/*", True, False, False, False, False)),
    ("/home/*", WS, ("/home/*", False, False, False, False, False)),
    ("/home/bob/*", WS, ("/home/bob/*", False, False, True, False, False)),
    ("*.py", WS, ("/workspace/*.py", True, False, False, False, False)),
    ("~/..", WS, ("~/..", False, False, True, False, False)),
    ("~/../..", "/home/u/p", ("~/../..", False, False, True, True, False)),
    ("~+", "/tmp", ("/tmp", False, False, False, False, False)),
    ("<(curl x)", WS, ("", False, False, False, False, True)),
])
def test_globs_and_home_forms(raw, cwd, expected):
    workspace = "/home/u/p" if cwd == "/home/u/p" else WS
    assert flags_of(describe_path(raw, cwd, workspace)) == expected


@pytest.mark.parametrize("raw, device", [("/dev/sda", True), ("/dev/nvme0n1p1", True), ("/dev/mapper/root", True),
                                         ("/dev/disk/by-id/x", True), ("/dev/mem", True), ("/dev/null", False),
                                         ("/dev/shm/x", False), ("/proc/sysrq-trigger", True), ("/workspace/sda", False)])
def test_devices(raw, device):
    assert describe_path(raw, WS, WS)["device"] is device


def test_links_are_followed():
    links = {"/workspace/h": "~", "/workspace/r": "/", "/workspace/in": "/workspace/sub", "/workspace/u": None}
    home = describe_path("h/", WS, WS, links)
    assert (home["normalized"], home["is_home"], home["via_link"]) == ("~", True, "/workspace/h")
    assert describe_path("h/.ssh", WS, WS, links)["normalized"] == "~/.ssh"
    assert describe_path("r/etc", WS, WS, links)["normalized"] == "/etc"
    assert describe_path("r/*", WS, WS, links)["is_root"] is True
    assert describe_path("in/x", WS, WS, links)["in_workspace"] is True
    assert describe_path("u/x", WS, WS, links)["dynamic"] is True
    assert describe_path("hx", WS, WS, links)["via_link"] == ""


def test_link_chains_and_loops_end():
    assert follow_links("/a/x", {"/a": "/b", "/b": "/c"}) == ("/c/x", "/a")
    assert follow_links("/a", {"/a": "/b", "/b": "/a"})[0] is None
    assert resolve_path("a/b", WS, {"/workspace/a": "/etc"}) == "/etc/b"
    assert resolve_path("$X", WS) is None


PATHISH = st.lists(st.sampled_from(["", ".", "..", "a", "b", "*", "~", "$HOME", "${HOME}", "$X", "root", "home",
                                    "workspace", "/"]), max_size=8).map("/".join)


@settings(max_examples=300, deadline=None)
@given(PATHISH, st.sampled_from([WS, "/", "~/p", None, "/workspace/sub"]))
def test_describe_path_properties(raw, cwd):
    info = describe_path(raw, cwd, WS)
    assert tuple(info) == PATH_KEYS
    if info["dynamic"]:
        assert not (info["in_workspace"] or info["is_root"] or info["is_workspace_parent"])
        return
    again = describe_path(info["normalized"], cwd, WS)          # normalising is idempotent
    assert again["normalized"] == info["normalized"]
    assert flags_of(again)[1:] == flags_of(info)[1:]
    if info["is_root"] or info["is_workspace_parent"] or info["is_home"]:
        assert info["in_workspace"] is False
    if info["in_workspace"]:
        assert info["normalized"] == WS or info["normalized"].startswith(WS + "/")


