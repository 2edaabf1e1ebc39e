"""unwrap: wrappers and multi-call binaries are removed down to the command that runs; shell helpers."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.toolcalls.wrappers import find_exec_groups, parallel_script, shell_script, shell_script_file, unwrap


@pytest.mark.parametrize("argv, expected", [
    ("sudo rm -rf /", ["rm", "-rf", "/"]),
    ("sudo -u root -- rm x", ["rm", "x"]),
    ("sudo -E -H rm x", ["rm", "x"]),
    ("sudo -Eu root rm x", ["rm", "x"]),
    ("sudo --user=root rm x", ["rm", "x"]),
    ("sudo A=1 rm x", ["rm", "x"]),
    ("doas -u root rm x", ["rm", "x"]),
    ("pkexec --user root rm x", ["rm", "x"]),
    ("env -i A=1 rm x", ["rm", "x"]),
    ("env -S 'rm -rf /'", ["rm", "-rf", "/"]),
    ("env -S'rm -rf /'", ["rm", "-rf", "/"]),
    ("env --split-string='rm -rf /'", ["rm", "-rf", "/"]),
    ("env -u HOME -- rm x", ["rm", "x"]),
    ("cross-env NODE_ENV=x rm x", ["rm", "x"]),
    ("nice -n 5 rm x", ["rm", "x"]),
    ("nice -10 rm x", ["rm", "x"]),
    ("nice --adjustment=3 rm x", ["rm", "x"]),
    ("ionice -c3 rm x", ["rm", "x"]),
    ("ionice -c 2 -n 7 rm x", ["rm", "x"]),
    ("nohup rm x", ["rm", "x"]),
    ("time rm x", ["rm", "x"]),
    ("timeout -s 9 10 rm x", ["rm", "x"]),
    ("timeout --kill-after=5 10s rm x", ["rm", "x"]),
    ("stdbuf -oL rm x", ["rm", "x"]),
    ("stdbuf -o L rm x", ["rm", "x"]),
    ("setsid -f rm x", ["rm", "x"]),
    ("flock -n /tmp/l rm x", ["rm", "x"]),
    ("flock -w 3 /tmp/l rm x", ["rm", "x"]),
    ("chroot / rm -rf /", ["rm", "-rf", "/"]),
    ("chroot --userspec=a:b /srv rm x", ["rm", "x"]),
    ("unshare -r -n rm x", ["rm", "x"]),
    ("unshare --map-root-user --mount rm x", ["rm", "x"]),
    ("nsenter -t 1 -m rm x", ["rm", "x"]),
    ("xargs -0 -n 1 rm -f", ["rm", "-f"]),
    ("xargs", ["echo"]),
    ("command rm x", ["rm", "x"]),
    ("builtin cd x", ["cd", "x"]),
    ("exec rm x", ["rm", "x"]),
    ("exec -a name rm x", ["rm", "x"]),
    ("sudo nice nohup /bin/rm x", ["/bin/rm", "x"]),
    ("command -v rm", ["command", "-v", "rm"]),
    ("busybox rm -rf /", ["rm", "-rf", "/"]),
    ("toybox rm -rf /", ["rm", "-rf", "/"]),
    ("/bin/busybox sh -c x", ["sh", "-c", "x"]),
    ("busybox --list", ["busybox", "--list"]),
    ("coreutils --coreutils-prog=rm -rf /", ["rm", "-rf", "/"]),
    ("taskset 0x1 rm x", ["rm", "x"]),
    ("taskset -c 0,1 rm x", ["rm", "x"]),
    ("chrt -f 10 rm x", ["rm", "x"]),
    ("numactl --physcpubind=0 rm x", ["rm", "x"]),
    ("prlimit --nofile=10 rm x", ["rm", "x"]),
    ("systemd-run --user --scope rm x", ["rm", "x"]),
    ("strace -f -o /tmp/t rm x", ["rm", "x"]),
    ("ltrace rm x", ["rm", "x"]),
    ("valgrind --tool=memcheck rm x", ["rm", "x"]),
    ("fakeroot -- rm x", ["rm", "x"]),
    ("firejail --noprofile rm x", ["rm", "x"]),
    ("proxychains4 -f c rm x", ["rm", "x"]),
    ("caffeinate -i rm x", ["rm", "x"]),
    ("unbuffer rm x", ["rm", "x"]),
    ("xvfb-run -a rm x", ["rm", "x"]),
    ("uv run rm x", ["rm", "x"]),
    ("uv run --with requests python -c x", ["python", "-c", "x"]),
    ("uv run script.py", ["python", "script.py"]),
    ("uvx --from pkg tool a", ["tool", "a"]),
    ("poetry run rm x", ["rm", "x"]),
    ("pipenv run rm x", ["rm", "x"]),
    ("conda run -n base rm x", ["rm", "x"]),
    ("bundle exec rm x", ["rm", "x"]),
    ("npx -y rimraf /", ["rimraf", "/"]),
    ("npm exec -- rimraf /", ["rimraf", "/"]),
    ("pnpm dlx rimraf /", ["rimraf", "/"]),
    ("bunx rimraf /", ["rimraf", "/"]),
    ("mise exec -- rm x", ["rm", "x"]),
    ("direnv exec . rm x", ["rm", "x"]),
    ("gdb --args rm x", ["rm", "x"]),
    ("rm x", ["rm", "x"]),
    ("npm run build", ["npm", "run", "build"]),
    ("bundle install", ["bundle", "install"]),
])
def test_unwrap(argv, expected):
    import shlex
    assert unwrap(shlex.split(argv)).argv == expected


@pytest.mark.parametrize("argv, script", [
    (["su", "-c", "rm -rf /", "root"], "rm -rf /"),
    (["su", "root", "-c", "ls"], "ls"),
    (["su", "--command=rm x"], "rm x"),
    (["runuser", "bob", "-c", "rm x"], "rm x"),
    (["flock", "/tmp/l", "-c", "rm x"], "rm x"),
    (["watch", "-n", "1", "rm", "-rf", "/"], "rm -rf /"),
    (["script", "-qc", "rm -rf ~", "/dev/null"], "rm -rf ~"),
    (["sg", "wheel", "rm -rf ~"], "rm -rf ~"),
    (["nix-shell", "--run", "rm x"], "rm x"),
    (["npx", "-c", "rm x"], "rm x"),
])
def test_wrapper_scripts(argv, script):
    unwrapped = unwrap(argv)
    assert unwrapped.script == script
    assert unwrapped.argv == []


@pytest.mark.parametrize("argv", [["sudo"], ["sudo", "-i"], ["sudo", "-s"], ["su"], ["su", "-", "root"],
                                  ["doas", "-s"], ["chroot", "/"], ["unshare", "-r"], ["script"]])
def test_interactive_shells(argv):
    assert unwrap(argv).interactive is True


def test_wrapper_side_facts():
    assert unwrap(["env", "-C", "/", "rm", "x"]).chdir == "/"
    assert unwrap(["env", "A=1", "PAGER=x", "git", "log"]).env == {"A": "1", "PAGER": "x"}
    assert unwrap(["time", "-o", "/etc/x", "ls"]).writes == ["/etc/x"]
    assert unwrap(["script", "-c", "ls", "log.txt"]).writes == ["log.txt"]
    assert unwrap(["xargs", "-I{}", "rm", "{}"]).replace == "{}"
    assert unwrap(["xargs", "rm"]).stdin_operands is True
    assert unwrap(["systemd-run", "-H", "host", "rm", "x"]).remote == "host"
    assert unwrap(["sudo", "-l"]).argv == []
    assert unwrap(["sudo", "-e", "/etc/hosts"]).argv == ["sudoedit", "/etc/hosts"]
    assert unwrap(["sudo", "nice", "rm"]).wrappers == ["sudo", "nice"]


@pytest.mark.parametrize("argv, expected", [
    (["parallel", "rm -rf {}", ":::", "/", "~"], ("rm -rf /\nrm -rf '~'", False, None)),
    (["parallel", "-j4", "gzip"], ("gzip $PARALLEL_ITEM", True, None)),
    (["parallel", "-S", "host", "rm", ":::", "a"], ("rm a", False, "host")),
])
def test_parallel(argv, expected):
    assert parallel_script(argv) == expected


@pytest.mark.parametrize("argv, expected", [
    (["bash", "-c", "ls"], "ls"),
    (["bash", "-ec", "ls"], "ls"),
    (["bash", "--norc", "-c", "ls"], "ls"),
    (["bash", "-o", "pipefail", "-c", "ls"], "ls"),
    (["bash", "-c"], ""),
    (["bash", "x.sh"], ""),
    (["bash"], None),
    (["bash", "-s"], None),
    (["bash", "-"], None),
])
def test_shell_script(argv, expected):
    assert shell_script(argv) == expected


def test_shell_script_file():
    assert shell_script_file(["bash", "-e", "x.sh", "arg"]) == "x.sh"
    assert shell_script_file(["bash"]) is None


def test_find_exec_groups():
    assert find_exec_groups(["find", ".", "-exec", "rm", "{}", ";", "-ok", "ls", "+"]) == [["rm", "{}"], ["ls"]]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["sudo", "-u", "x", "env", "A=1", "-S", "rm -rf /", "nice", "-n", "5", "timeout",
                                 "10", "xargs", "-I", "{}", "--", "busybox", "rm", "-rf", "/", "su", "-c", "flock",
                                 "watch", "chroot", "uv", "run", "npx", "-y", "parallel", ":::", "-", "gdb",
                                 "--args", "command", "-v"]), max_size=12))
def test_unwrap_never_raises(words):
    result = unwrap(words)
    assert isinstance(result.argv, list)
    assert all(isinstance(w, str) for w in result.argv)
