"""`sandgate run`'s pure parts: the command's environment, exit statuses, denial lines."""
from __future__ import annotations

import io

import pytest

from sandgate.run import DenialReporter, child_env, denial_line, exit_status
from sandgate.types import Event


def test_child_env_drops_harness_credentials_and_adds_the_session():
    base = {"PATH": "/bin", "SANDGATE_TOKEN": "h", "SANDGATE_API__LISTEN": "x", "VAULT_TOKEN": "v",
            "ALL_PROXY": "socks5://elsewhere", "HTTPS_PROXY": "http://old", "HOME": "/root"}
    env = child_env(base, {"HTTPS_PROXY": "http://sandgate:t@127.0.0.1:1", "SSL_CERT_FILE": "/tmp/ca.pem"})
    assert env == {"PATH": "/bin", "HOME": "/root", "HTTPS_PROXY": "http://sandgate:t@127.0.0.1:1",
                   "SSL_CERT_FILE": "/tmp/ca.pem"}


@pytest.mark.parametrize("code,status", [(0, 0), (1, 1), (255, 255), (-15, 143), (-9, 137), (-2, 130)])
def test_exit_status(code, status):
    assert exit_status(code) == status


def ev(seq, kind="egress", action="deny", host="evil.test", reasons=("not allowed",), codes=("egress.x",)):
    return Event(seq=seq, kind=kind, action=action, host=host, reasons=tuple(reasons), codes=tuple(codes))


@pytest.mark.parametrize("event,line", [
    (ev(1), "sandgate: denied evil.test: not allowed"),
    (ev(1, kind="exfiltration"), "sandgate: denied evil.test: not allowed"),
    (ev(1, reasons=()), "sandgate: denied evil.test: egress.x"),
    (ev(1, reasons=("two\nlines  here",)), "sandgate: denied evil.test: two lines here"),
    (ev(1, host=None), "sandgate: denied ?: not allowed"),
    (ev(1, action="allow"), None), (ev(1, action="ask"), None), (ev(1, kind="toolcall"), None),
    (ev(1, kind="session.created", action="create"), None),
])
def test_denial_line(event, line):
    assert denial_line(event) == line


def test_reporter_one_line_per_destination_and_reason_and_tracks_seq():
    out = io.StringIO()
    rep = DenialReporter(out)
    rep.feed([ev(1), ev(2), ev(3, host="other.test"), ev(4, action="allow")])
    rep.feed([ev(5), ev(6, reasons=("another reason",))])
    assert out.getvalue().splitlines() == ["sandgate: denied evil.test: not allowed",
                                           "sandgate: denied other.test: not allowed",
                                           "sandgate: denied evil.test: another reason"]
    assert rep.after == 6
