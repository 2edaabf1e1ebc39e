"""`python -I -S relay_launcher.py SOCKET SCRIPT ARGS...`: a real process whose program, `python SCRIPT ARGS`, runs
forked from a zygote of the test process (tests/support/forked.py, `relay_command`).

For a process that a program under test starts itself (`sandgate mcp` starts its stdio upstream server): that
program really spawns this process, on its own pipes, in its own session, with the environment and working
directory it chose. This process hands its stdin, stdout, stderr, environment and working directory to the test
process's relay (the unix socket SOCKET; `@NAME` is NAME in Linux's abstract namespace), which forks `python SCRIPT ARGS` from the zygote on those descriptors;
it closes its own stdin and stdout (the child holds the pipes, as an exec'd server would), passes SIGTERM, SIGINT
and SIGHUP on to the child, and ends as the child ends: its exit status, or the same signal. If this process is
killed, the relay kills the child. Where the relay cannot fork (no zygote, SANDGATE_TEST_EXEC=1, an import-time
variable that differs), this process execs `python SCRIPT ARGS` itself.

It imports nothing beyond what the interpreter has at start (`-I -S`: no site, no PYTHON* variables read), about
20 ms of CPU against the server's 0.9 s of SDK imports.
"""
import json
import os
import signal
import socket
import sys


def main() -> None:
    path, script, *args = sys.argv[1:]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect("\0" + path[1:] if path.startswith("@") else path)
        message = {"script": script, "args": args, "env": dict(os.environ), "cwd": os.getcwd()}
        socket.send_fds(sock, [json.dumps(message).encode()], [0, 1, 2])
        reply = json.loads(sock.recv(1 << 16) or b"{}")
    except (OSError, ValueError):
        reply = {}
    if "pid" not in reply:                       # run it here instead: the real process
        sock.close()
        os.execv(sys.executable, [sys.executable, script, *args])

    def forward(signum: int, _frame: object) -> None:
        try:
            sock.send(json.dumps({"signal": signum}).encode())
        except OSError:
            pass
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    while True:
        data = sock.recv(1 << 16)
        if not data:                             # the relay is gone (its test process ended)
            os._exit(1)
        status = json.loads(data).get("exit")
        if status is not None:
            break
    if status < 0:                               # ended by a signal: end by the same one
        if -status != signal.SIGKILL:
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    os._exit(status & 0xFF)


if __name__ == "__main__":
    main()
