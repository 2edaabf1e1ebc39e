"""carriers.py and tables.py: what unknown programs and remote runners carry, and the tables read from data."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.toolcalls.carriers import Carried, executor_carried, unknown_carried
from gateway.toolcalls.describe import describe_line
from gateway.toolcalls.tables import build_tables, default_tables, shipped_config, tables_for

T = default_tables()


def carried(argv: list[str]) -> list[Carried]:
    return unknown_carried(argv, T)


def executed(argv: list[str]) -> tuple[str, list[Carried]]:
    spec, used = T.executor(argv[0], [w for w in argv[1:T.depth] if not w.startswith("-")])
    return executor_carried(spec, argv, used)


def test_unknown_program_forms():
    assert carried(["cgexec", "-g", "cpu:x", "bash", "-c", "rm -rf /"]) == [
        Carried("argv", ("bash", "-c", "rm -rf /"))]
    assert carried(["setpriv", "terraform", "destroy"]) == [Carried("argv", ("terraform", "destroy"))]
    assert carried(["hyperfine", "-w", "3", "make clean", "ls"]) == [Carried("script", script="make clean"),
                                                                       Carried("argv", ("ls",))]
    assert carried(["x", "--", "rm", "-rf", "~"]) == [Carried("argv", ("rm", "-rf", "~"))]
    assert carried(["capsh", "--", "-c", "rm -rf ~"]) == [Carried("script", script="rm -rf ~")]
    assert carried(["x", "--cmd=rm -rf /"]) == [Carried("script", script="rm -rf /")]
    assert carried(["x", "/bin/rm", "-rf", "/"]) == [Carried("argv", ("/bin/rm", "-rf", "/"))]


def test_unknown_program_with_nothing_behind_it():
    assert carried(["my-internal-tool", "--version"]) == []
    assert carried(["x", "--lang", "sh"]) == []                 # a shell that would only read stdin
    assert carried(["x", "python"]) == []
    assert carried(["x", "sudo"]) == []                         # an interactive wrapper
    assert carried(["x", "src/test", "data/rm"]) == []          # relative paths are files, not programs
    assert carried(["ruff", "format", "src"]) == []             # its own subcommand
    assert carried(["mytool", "init"]) == []
    assert carried(["mytool", "init", "rm", "x"]) == [Carried("argv", ("rm", "x"))]   # still read after it


def test_executors():
    assert executed(["ssh", "-p", "22", "h", "ls", "-la"]) == ("h", [Carried("script", script="ls -la")])
    assert executed(["docker", "exec", "-it", "-u", "root", "c", "rm", "-rf", "/"]) == (
        "c", [Carried("argv", ("rm", "-rf", "/"))])
    assert executed(["kubectl", "exec", "-n", "x", "pod", "--", "ls"]) == ("pod", [Carried("argv", ("ls",))])
    assert executed(["ansible", "all", "-m", "shell", "-a", "chdir=/x rm -rf ~"]) == (
        "all", [Carried("script", script="rm -rf ~")])
    assert executed(["ansible", "all", "-a", "ls"]) == ("all", [Carried("script", script="ls")])
    assert executed(["ansible", "all", "-m", "file", "-a", "path=/srv state=absent"]) == (
        "all", [Carried("argv", ("rm", "-rf", "--", "/srv"))])
    assert executed(["ansible", "all", "-m", "ping"]) == ("all", [])
    assert executed(["salt", "-G", "os:x", "cmd.run", "rm -rf /", "cwd=/tmp"]) == (
        "os:x", [Carried("script", script="rm -rf /")])
    assert executed(["salt-call", "file.remove", "/etc"]) == ("", [Carried("argv", ("rm", "-rf", "--", "/etc"))])
    assert executed(["pssh", "-h", "hosts", "-i", "rm -rf /"]) == ("hosts", [Carried("script", script="rm -rf /")])
    assert executed(["gcloud", "compute", "ssh", "vm", "--command", "ls"]) == ("vm", [Carried("script", script="ls")])


def test_facts_mark_what_carried_them():
    facts, _ = describe_line("setpriv rm -rf build", "/workspace")
    assert [c.get("via_unknown") for c in facts["commands"]] == [None, "setpriv"]
    facts, _ = describe_line("ssh h 'rm -rf x'", "/workspace")
    assert facts["commands"][1]["remote"] == {"host": "h", "via": "ssh"}
    assert facts["commands"][1]["origin"] == "ssh h"
    facts, _ = describe_line("docker exec c rm -rf /", "/workspace")
    assert facts["commands"][1]["container"] == {"name": "c", "via": "docker exec"}
    assert facts["commands"][1]["paths"][0]["is_root"] is True


def test_elsewhere_leaves_no_files_of_the_session():
    _facts, effects = describe_line("ssh h 'echo x > run.sh'; docker exec c ln -s / l", "/workspace")
    assert effects.files == {} and effects.links == {}


def test_tables_are_data():
    cfg = shipped_config()
    assert "ssh" in cfg["executors"] and isinstance(cfg["subcommand_words"], list)
    site = {**cfg, "plain_programs": ["hyperfine"], "executors": {**cfg["executors"], "myrun exec": {"targets": 1}}}
    tables = build_tables(site)
    assert unknown_carried(["hyperfine", "rm -rf /"], T) != []
    assert tables.known("hyperfine")
    spec, used = tables.executor("myrun", ["exec", "box"])
    assert (spec.name, used) == ("myrun exec", 1)
    assert executor_carried(spec, ["myrun", "exec", "box", "rm", "-rf", "/"], used)[1] == [
        Carried("argv", ("rm", "-rf", "/"))]
    assert tables_for(site) is tables_for(site)
    assert build_tables(None).known("rm") is False and build_tables(None).known("bash")
    assert build_tables({"executors": {"x": "nonsense", "": {}}, "plain_programs": 3}).executors == {}


@given(st.lists(st.text(max_size=12), max_size=8))
def test_never_raises(words):
    unknown_carried(["x", *words], T)
    for key in T.executors:
        executor_carried(T.executors[key], [*key, *words], len(key) - 1)


def test_archivers_and_compressors_consume_their_inputs():
    from gateway.toolcalls import effects as fx

    assert fx.option_deletes("7z", ["-sdel"], ["a", "x.7z", "~"], ["7z", "a", "-sdel", "x.7z", "~"]) == ["~"]
    assert fx.option_deletes("7z", [], ["a", "x.7z", "src"], ["7z", "a", "x.7z", "src"]) == []
    assert fx.option_deletes("rar", [], ["m", "x.rar", "a", "b"], ["rar", "m", "x.rar", "a", "b"]) == ["a", "b"]
    assert fx.option_deletes("rar", ["-df"], ["a", "x.rar", "a"], ["rar", "a", "-df", "x.rar", "a"]) == ["a"]
    assert fx.option_deletes("rar", [], ["a", "x.rar", "a"], ["rar", "a", "x.rar", "a"]) == []
    assert fx.consumed("gzip", ["-r"], ["~"]) == ["~"]
    assert fx.consumed("gzip", ["-k"], ["x"]) == [] and fx.consumed("xz", ["-c"], ["x"]) == []
    assert fx.consumed("zstd", [], ["x"]) == [] and fx.consumed("zstd", ["--rm"], ["x"]) == ["x"]
    assert fx.consumed("gzip", [], ["-"]) == [] and fx.consumed("cat", [], ["x"]) == []


def test_tables_of_a_policy_revision_and_the_memo_key():
    from gateway.toolcalls.memo import FactsMemo
    from gateway.toolcalls.tables import tables_of_policy

    data = {"sandgate": {"config": {"toolcall": {**shipped_config(), "plain_programs": ["zz-tool"]}}}}
    assert tables_of_policy(data).known("zz-tool") and not T.known("zz-tool")
    assert tables_of_policy(None) is default_tables() and tables_of_policy({"sandgate": 1}) is default_tables()
    key = FactsMemo.key("shell", "{}", "/w", {}, {}, None, (), "rev-a")
    assert key != FactsMemo.key("shell", "{}", "/w", {}, {}, None, (), "rev-b")


def test_wrappers_are_data():
    from gateway.toolcalls.wrappers import WrapperTable, unwrap

    cfg = shipped_config()
    assert "sudo" in cfg["wrappers"] and "uv run" in cfg["wrappers"]
    site = build_tables({**cfg, "wrappers": {**cfg["wrappers"], "myprivs": {"args": "-u", "skip": 0}}})
    assert unwrap(["myprivs", "-u", "rm", "ls"], table=site.wrappers).argv == ["ls"]
    facts, _ = describe_line("myprivs -u x rm -rf ~", "/workspace", tables=site)
    assert facts["commands"][0]["effective"] == ["rm", "-rf", "~"]
    old = {k: v for k, v in cfg.items() if k != "wrappers"}       # a copy from before wrappers were data
    assert build_tables(old).wrappers == default_tables().wrappers
    assert WrapperTable.of({"x": {"skip": "two", "args": 3, "join": "yes"}, "a b c": {}, 4: {}}).single["x"] == \
        WrapperTable.of({"x": {}}).single["x"]


def test_container_mounts_and_workdir():
    from gateway.toolcalls.carriers import executor_context

    argv = ["docker", "run", "-v", "~:/h", "--mount", "type=bind,source=/srv,target=/s", "-v", "named:/n", "-w",
            "/app", "alpine", "rm", "-rf", "/h"]
    spec, used = T.executor("docker", ["run"])
    assert executor_context(spec, argv, used) == ([("~", "/h"), ("/srv", "/s")], "/app")
    assert executor_carried(spec, argv, used) == ("alpine", [Carried("argv", ("rm", "-rf", "/h"))])
    facts, _ = describe_line(" ".join(argv), "/workspace")
    assert facts["commands"][1]["paths"][0]["is_home"] is True
    assert executed(["docker", "run", "--entrypoint", "rm", "img", "-rf", "/"]) == (
        "img", [Carried("argv", ("rm", "-rf", "/"))])


def test_written_scripts_and_stdin_are_carried():
    assert unknown_carried(["x", "run.sh"], T, lambda w: w == "run.sh") == [Carried("argv", ("run.sh",))]
    assert unknown_carried(["x", "run.sh"], T) == []
    facts, _ = describe_line("echo 'rm -rf ~' > x.sh; mytool x.sh", "/workspace")
    assert any(c.get("via_unknown") == "mytool" and c["name"] == "rm" for c in facts["commands"])
    facts, _ = describe_line("echo '# x' > notes.md; mytool notes.md", "/workspace")
    assert not any(c.get("via_unknown") for c in facts["commands"])
    facts, _ = describe_line("echo 'rm -rf /' | ssh h", "/workspace")
    assert facts["commands"][-1]["name"] == "rm" and facts["commands"][-1]["remote"]["via"] == "ssh"
    facts, _ = describe_line("ssh h < unseen.sh", "/workspace")
    assert facts["commands"][0]["stdin_script"] is True


def test_command_options_and_here():
    spec, used = T.executor("nix", ["shell"])
    assert spec.here and executor_carried(spec, ["nix", "shell", "p#x", "-c", "rm", "-rf", "~"], used) == (
        "", [Carried("argv", ("rm", "-rf", "~"))])
    facts, _ = describe_line("nix shell p#x -c rm -rf build", "/workspace")
    inner = facts["commands"][1]
    assert inner["origin"] == "nix shell" and inner["paths"][0]["in_workspace"] is True
    assert "container" not in inner and "remote" not in inner
