"""Commands carried by programs sandgate does not model, and by remote or container runners, are decided as if
they ran; archive-and-delete and mass rewrites are deletes of what they consume.

Every entry goes through the product's decision path in process (the facts sandgate builds, the shipped policy
on the shipped engine: tests/gateway/toolcalls/corpus.py), and a slice through POST /v1/toolcalls of a real
sandgate. Hypothesis wraps the dangerous commands in random unknown program names and in every remote runner:
none may come back `allow`; an ordinary command wrapped the same way keeps `allow`.
"""
from __future__ import annotations

import keyword
import shlex

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.toolcalls.tables import default_tables
from tests.conftest import LOOPBACK_CONFIG
from tests.gateway.toolcalls.corpus import evaluator, run_entry
from tests.support.gateway import Sandgate

# (command, expected decision, why). Wipes of the root or a home are `deny`; the rest must not be `allow`.
UNKNOWN_WRAPPERS = [
    ("cgexec -g cpu:x bash -c 'rm -rf /'", "deny", "a cgroup runner carrying a shell"),
    ("setpriv --reuid 1000 terraform destroy -auto-approve", "ask", "privilege tool carrying a destroy"),
    ("capsh --drop=cap_net_raw -- -c 'rm -rf ~'", "deny", "capsh runs a shell after --"),
    ("bwrap --bind / / rm -rf ~", "deny", "a sandbox carrying a home wipe"),
    ("firejail --quiet rm -rf ~", "deny", "a known wrapper still unwraps"),
    ("systemd-inhibit --why=x rm -rf /", "deny", "an inhibitor lock runner"),
    ("hyperfine 'rm -rf /'", "deny", "a benchmark runs its quoted command"),
    ("hyperfine --warmup 3 --prepare 'rm -rf ~' 'ls'", "deny", "a prepare step is a command too"),
    ("entr -s 'rm -rf ~'", "deny", "a file watcher's command"),
    ("retry --times 3 -- rm -rf ~", "deny", "a retry tool after --"),
    ("with-retry rm -rf /", "deny", "a retry tool's command words"),
    ("until-success git push --force origin main", "ask", "a retry tool carrying a force push"),
    ("chronic rm -rf ~/", "deny", "moreutils chronic"),
    ("ts-run -- dd if=/dev/zero of=/dev/sda", "deny", "a device write after --"),
    ("my-internal-tool exec -- rm -rf ~", "deny", "an internal runner after --"),
    ("./tools/runner.sh rm -rf /", "deny", "a local script taking a command"),
    ("/opt/bin/launcher --flag sh -c 'rm -rf /'", "deny", "an absolute unknown launcher"),
    ("cpulimit -l 50 -- rm -rf ~", "deny", "a CPU limiter"),
    ("trickle -d 100 curl -X DELETE https://api.other.org/v1/repo", "ask", "a bandwidth shaper carrying a DELETE"),
    ("faketime '2020-01-01' rm -rf ~", "deny", "a faked clock"),
    ("pv-run --cmd='rm -rf /'", "deny", "an option's value carrying a command line"),
    ("mytool --on-exit='kubectl delete ns prod'", "ask", "an option's value carrying a destructive CLI"),
    ("sem -j 4 rm -rf ~", "deny", "a semaphore runner"),
    ("tsp rm -rf /", "deny", "a task spooler"),
    ("nq git reset --hard HEAD~3", "ask", "a queue runner carrying a destructive git"),
    ("daemonize -c /tmp /bin/rm -rf /", "deny", "an absolute program path"),
    ("loginctl-run bash -c 'mkfs.ext4 /dev/sda1'", "deny", "a filesystem tool through a shell"),
    ("sshpass -p secret ssh host 'rm -rf ~'", "deny", "a password helper carrying ssh"),
    ("echo 'rm -rf ~' > x.sh && hyperfine ./x.sh", "deny", "a script the session wrote, run by a benchmark"),
    ("printf 'rm -rf /\\n' > job.sh; tsp job.sh", "deny", "a written script named without ./"),
]
REMOTE_RUNNERS = [
    ("docker exec c rm -rf /", "deny", "a container's root"),
    ("docker exec -it -u root c bash -c 'rm -rf ~'", "deny", "a shell in a container"),
    ("podman exec web rm -rf /", "deny", "podman"),
    ("docker compose exec web rm -rf ~", "deny", "compose"),
    ("kubectl exec pod -- rm -rf /", "deny", "a pod's root"),
    ("kubectl exec -n prod deploy/api -c app -- sh -c 'rm -rf /data /'", "deny", "a pod's shell"),
    ("oc exec pod -- rm -rf ~", "deny", "OpenShift"),
    ("lxc exec box -- rm -rf /", "deny", "LXD"),
    ("ssh host rm -rf ~", "deny", "a remote home"),
    ("ssh -p 2222 -i key user@host 'rm -rf /'", "deny", "ssh with options"),
    ("ssh host 'cd /srv && rm -rf app'", "ask", "a remote delete elsewhere asks"),
    ("ssh prod terraform destroy -auto-approve", "ask", "a remote destroy"),
    ("autossh -M 0 host 'rm -rf ~'", "deny", "autossh"),
    ("ansible localhost -m shell -a 'rm -rf ~'", "deny", "ansible's shell module"),
    ("ansible all -a 'rm -rf /'", "deny", "ansible's default command module"),
    ("ansible web -i inv -m file -a 'path=/ state=absent'", "deny", "ansible's file module removing the root"),
    ("ansible web -m ansible.builtin.command -a 'chdir=/srv rm -rf ~'", "deny", "a module argument before the command"),
    ("ansible all -m copy -a 'src=x dest=/etc/x'", "ask", "a module not modelled runs on remote hosts"),
    ("salt '*' cmd.run 'rm -rf /'", "deny", "salt cmd.run"),
    ("salt-call cmd.run 'rm -rf ~'", "deny", "salt-call"),
    ("salt -G 'os:Ubuntu' file.remove /", "deny", "salt file.remove"),
    ("pssh -h hosts.txt -i 'rm -rf /'", "deny", "pssh"),
    ("parallel-ssh -H 'a b' rm -rf ~", "deny", "parallel-ssh"),
    ("pdsh -w node[1-4] rm -rf /", "deny", "pdsh"),
    ("clush -w n1 'rm -rf ~'", "deny", "clush"),
    ("gcloud compute ssh vm --zone z --command 'rm -rf /'", "deny", "gcloud compute ssh"),
    ("vagrant ssh -c 'rm -rf ~'", "deny", "vagrant ssh"),
    ("docker run --rm alpine rm -rf /", "deny", "a container's command"),
    ("docker run --rm -v ~:/h alpine rm -rf /h", "deny", "home mounted into a container and wiped there"),
    ("podman run --mount type=bind,source=/,target=/x alpine rm -rf /x", "deny", "the root mounted and wiped"),
    ("docker run --entrypoint rm alpine -rf /", "deny", "the entrypoint is the program"),
    ("docker run --rm -v \"$PWD\":/app -w /app alpine rm -rf src", "ask", "a delete in the mounted workspace"),
    ("rsh host rm -rf ~", "deny", "rsh"),
    ("echo 'rm -rf ~' | ssh host", "deny", "a remote shell reading its commands from stdin"),
    ("echo 'rm -rf /' | docker exec -i c sh", "deny", "a container's shell reading stdin"),
    ("ssh host < cmds.sh", "ask", "a remote shell reading a script it cannot see"),
    ("docker compose run --rm web rm -rf /", "deny", "a compose service's one-off container"),
    ("heroku run 'rm -rf /' -a app", "deny", "a one-off dyno"),
    ("fly ssh console -C 'rm -rf /'", "deny", "a Fly machine"),
    ("gh codespace ssh -c cs -- rm -rf ~", "deny", "a codespace"),
    ("nix shell nixpkgs#hello -c rm -rf ~", "deny", "a nix shell's command runs here"),
    ("podman machine ssh 'rm -rf ~'", "deny", "podman's VM"),
    ("az vm run-command invoke -g rg -n vm --command-id RunShellScript --scripts 'rm -rf /'", "deny",
     "a cloud VM's run-command"),
]
ARCHIVES = [
    ("7z a -sdel backup.7z ~", "deny", "7z deletes home after adding it"),
    ("7z a -sdel x.7z /", "deny", "7z deletes the root"),
    ("7z a -sdel x.7z src", "ask", "7z deletes what it archived"),
    ("rar a -df x.rar ~", "deny", "rar -df deletes home"),
    ("rar m x.rar ~/", "deny", "rar m moves files into the archive"),
    ("rar a -dr x.rar /", "deny", "rar -dr sends the root to the recycle bin"),
    ("zip -rm x.zip ~", "deny", "zip -m moves home into the archive"),
    ("zip -r -m x.zip src", "ask", "zip -m deletes what it archived"),
    ("tar --remove-files -czf x.tgz ~", "deny", "tar --remove-files over home"),
    ("tar -cf x.tar --remove-files /", "deny", "tar --remove-files over the root"),
    ("gzip -r ~", "deny", "gzip -r replaces every file of home"),
    ("gzip -r /", "deny", "gzip -r over the root"),
    ("gzip -r .", "ask", "gzip -r over the whole workspace"),
    ("bzip2 ~/.ssh/id_rsa", "ask", "bzip2 replaces a file outside the workspace"),
    ("xz -r ~", "deny", "xz over home"),
    ("xz ~/*", "deny", "xz over every file of home"),
    ("zstd --rm -r ~", "deny", "zstd --rm over home"),
    ("find ~ -type f -exec gzip {} +", "deny", "gzip of everything find lists in home"),
]
DANGEROUS = UNKNOWN_WRAPPERS + REMOTE_RUNNERS + ARCHIVES


@pytest.fixture(scope="module")
def ev():
    return evaluator()


def test_corpus_sizes():
    assert len(UNKNOWN_WRAPPERS) + len(REMOTE_RUNNERS) >= 40
    assert len(ARCHIVES) >= 10
    assert len({c for c, _e, _w in DANGEROUS}) == len(DANGEROUS)


def _wipe(entry: tuple[str, str, str]) -> bool:
    return entry[1] == "deny"


@pytest.mark.parametrize("entry", DANGEROUS, ids=[c[:70] for c, _e, _w in DANGEROUS])
def test_dangerous_entry(ev, entry):
    command, expect, why = entry
    decision = run_entry(ev, {"cmd": command})[0]
    assert decision["action"] != "allow", (why, decision)
    assert decision["action"] == expect, (why, decision)


# -- a slice through the HTTP API of a real sandgate -------------------------------------------------------
@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    with Sandgate(tmp_path_factory.mktemp("carriers"), {**LOOPBACK_CONFIG, "approvals": {"reuse_window_s": 0}}) as sg:
        yield sg


API_SLICE = DANGEROUS[::3]


@pytest.mark.e2e
@pytest.mark.parametrize("entry", API_SLICE, ids=[c[:70] for c, _e, _w in API_SLICE])
def test_dangerous_entry_through_the_api(gw, entry):
    command, expect, why = entry
    sid = gw.session(workload="persistent", allow=["example.com"], workspace="/workspace")["id"]
    resp = gw.call("POST", "/v1/toolcalls", json={"session": sid, "tool": "shell", "args": {"command": command},
                                                  "step": 1})
    assert resp.status_code == 200, resp.text
    assert resp.json()["decision"] == expect, (why, resp.json())


# -- properties ---------------------------------------------------------------------------------------------
TABLES = default_tables()
WRAPPABLE = [c for c, _e, _w in DANGEROUS]
ORDINARY = ["ls -la", "git status", "pytest -q tests", "cat README.md", "grep -rn TODO src", "echo hello",
            "python3 -c 'print(1)'", "make test", "npm test", "mkdir -p build", "touch notes.txt", "git diff"]


def _unknown(name: str) -> bool:
    return not TABLES.known(name) and not keyword.iskeyword(name) and \
        TABLES.executor(name, []) is None and name not in ("time", "coproc", "then", "do", "done", "fi", "esac")


NAMES = st.from_regex(r"[a-z][a-z0-9_-]{1,11}", fullmatch=True).filter(_unknown)
OPTIONS = st.lists(st.sampled_from(["-q", "--verbose", "-n 3", "--mode=fast", "-x", "--retries 2"]), max_size=2)


def _in_unknown(name: str, options: list[str], form: int, command: str) -> str:
    head = " ".join([name, *options])
    if form == 0:
        return f"{head} {shlex.quote(command)}"
    if form == 1:
        return f"{head} -- {command}"
    if form == 2:
        return f"{head} sh -c {shlex.quote(command)}"
    return f"{head} bash -c {shlex.quote(command)}"


RUNNERS = [
    lambda c: f"ssh host {shlex.quote(c)}", lambda c: f"ssh -p 22 u@h {shlex.quote(c)}",
    lambda c: f"docker exec c sh -c {shlex.quote(c)}", lambda c: f"podman exec -it c bash -c {shlex.quote(c)}",
    lambda c: f"kubectl exec pod -- sh -c {shlex.quote(c)}", lambda c: f"oc exec pod -c x -- bash -c {shlex.quote(c)}",
    lambda c: f"ansible all -m shell -a {shlex.quote(c)}", lambda c: f"ansible h -a {shlex.quote('sh -c ' + shlex.quote(c))}",
    lambda c: f"salt '*' cmd.run {shlex.quote(c)}", lambda c: f"salt-call cmd.run {shlex.quote(c)}",
    lambda c: f"pssh -H h -i {shlex.quote(c)}", lambda c: f"parallel-ssh -h hosts {shlex.quote(c)}",
    lambda c: f"pdsh -w n1 {shlex.quote(c)}", lambda c: f"lxc exec box -- sh -c {shlex.quote(c)}",
    lambda c: f"docker compose exec web sh -c {shlex.quote(c)}",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(WRAPPABLE), NAMES, OPTIONS, st.integers(0, 3))
def test_unknown_program_never_allows_a_dangerous_command(ev, command, name, options, form):
    wrapped = _in_unknown(name, options, form, command)
    assert run_entry(ev, {"cmd": wrapped})[0]["action"] != "allow", wrapped


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(WRAPPABLE), st.sampled_from(range(len(RUNNERS))))
def test_remote_runner_never_allows_a_dangerous_command(ev, command, runner):
    wrapped = RUNNERS[runner](command)
    assert run_entry(ev, {"cmd": wrapped})[0]["action"] != "allow", wrapped


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(ORDINARY), NAMES, OPTIONS, st.integers(0, 1))
def test_unknown_program_keeps_an_ordinary_command_allowed(ev, command, name, options, form):
    wrapped = _in_unknown(name, options, form, command)
    assert run_entry(ev, {"cmd": wrapped})[0]["action"] == "allow", wrapped


def test_every_runner_keeps_a_home_wipe_denied(ev):
    for runner in RUNNERS:
        command = runner("rm -rf ~")
        assert run_entry(ev, {"cmd": command})[0]["action"] == "deny", command
