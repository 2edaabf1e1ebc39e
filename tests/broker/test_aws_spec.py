"""`kind = "aws"` secrets: the table checked at start, one per session, two placeholders shaped like AWS keys."""
from __future__ import annotations

import asyncio

import pytest

from broker.broker import Broker
from broker.registry import PlaceholderRegistry
from broker.specs import check_session_secrets, parse_secret_specs


def norm(host: str) -> str:
    return host.lower().rstrip(".")


def specs(**tables):
    return parse_secret_specs(tables, norm)


def test_aws_spec_defaults_and_sources():
    spec = specs(aws={"kind": "aws", "access_key_id": "env:K", "secret_access_key": "env:S"})["aws"]
    assert spec.kind == "aws" and spec.hosts == ("*.amazonaws.com",) and spec.inject_in == frozenset()
    assert spec.all_sources() == ("env:K", "env:S") and spec.env == "AWS_ACCESS_KEY_ID"
    spec = specs(aws={"kind": "aws", "access_key_id": "env:K", "secret_access_key": "env:S",
                      "session_token": "env:T", "hosts": ["s3.example.internal"]})["aws"]
    assert spec.source_of("session_token") == "env:T" and spec.hosts == ("s3.example.internal",)


@pytest.mark.parametrize("table,message", [
    ({"kind": "aws", "access_key_id": "env:K"}, "secret_access_key"),
    ({"kind": "aws", "access_key_id": "nope", "secret_access_key": "env:S"}, "access_key_id"),
    ({"kind": "aws", "access_key_id": "env:K", "secret_access_key": "env:S", "source": "env:X"}, "unknown keys"),
    ({"kind": "aws", "access_key_id": "env:K", "secret_access_key": "env:S", "inject_in": ["body"]}, "unknown keys"),
    ({"kind": "kerberos", "source": "env:K", "hosts": ["a.b"]}, "kind"),
])
def test_bad_aws_tables_refuse_to_start(table, message):
    with pytest.raises(ValueError, match=message):
        specs(aws=table)


def test_one_aws_secret_per_session():
    both = specs(a={"kind": "aws", "access_key_id": "env:K", "secret_access_key": "env:S"},
                 b={"kind": "aws", "access_key_id": "env:K2", "secret_access_key": "env:S2"},
                 t={"source": "env:T", "hosts": ["x.y"]})
    check_session_secrets(["a", "t", "a"], both)
    with pytest.raises(ValueError, match="one aws secret"):
        check_session_secrets(["a", "b"], both)


def test_placeholders_env_and_registry(tmp_path):
    environ = {"K": "AKIAREALKEY000000001", "S": "real-secret-" + "s" * 28, "T": "tok-" + "t" * 30}
    broker = Broker.from_specs(specs(aws={"kind": "aws", "access_key_id": "env:K", "secret_access_key": "env:S",
                                          "session_token": "env:T"}), None, tmp_path, normalise_host=norm,
                               environ=environ)
    ph = asyncio.run(broker.new_placeholders(["aws"]))
    assert set(ph) == {"aws", "aws#secret"}
    assert ph["aws"].startswith("AKIA") and len(ph["aws"]) == 20 and ph["aws"].isupper() | ph["aws"][4:].isalnum()
    assert len(ph["aws#secret"]) == 40
    env = broker.env(ph, "/ca.pem")
    assert env == {"AWS_ACCESS_KEY_ID": ph["aws"], "AWS_SECRET_ACCESS_KEY": ph["aws#secret"], "AWS_CA_BUNDLE": "/ca.pem"}
    registry = PlaceholderRegistry()
    registry.add("s1", ph)
    assert registry.find(f"x {ph['aws#secret']} {ph['aws']}") == {("s1", "aws")}
    creds = asyncio.run(broker.aws_credentials("aws"))
    assert creds == (environ["K"], environ["S"], environ["T"])
    assert broker.fresh_aws_credentials("aws") == creds
    scrub = asyncio.run(broker.scrub_replacements(ph))
    assert scrub == {environ["K"].encode(): ph["aws"].encode(), environ["S"].encode(): ph["aws#secret"].encode(),
                     environ["T"].encode(): ph["aws#secret"].encode()}
    assert broker.fresh_scrub_replacements(ph) == scrub
    bindings = asyncio.run(broker.bindings(ph))
    assert [(b.name, b.inject_in) for b in bindings] == [("aws", frozenset())]
