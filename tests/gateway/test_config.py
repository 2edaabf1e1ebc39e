"""The configuration is strict: a key or section sandgate does not know, or a value of the wrong type, refuses
to start with a message naming it (a misspelt key must not leave sandgate running as if it were absent)."""
from __future__ import annotations

import pytest

from gateway.config import DEFAULTS, SCHEMA, Key, check_document, load_config


def load(tmp_path, text: str, environ: dict | None = None):
    path = tmp_path / "sandgate.toml"
    path.write_text(text)
    return load_config(path, tmp_path / "data", environ=environ or {})


@pytest.mark.parametrize("text, message", [
    ("[egress]\nprivat_allow = [\"127.0.0.0/8\"]\n", "unknown key 'egress.privat_allow' (did you mean 'private_allow'?)"),
    ("[apporvals]\nquorum = 2\n", "unknown section [apporvals] (did you mean 'approvals'?)"),
    ("[web.oidc]\nissuer = \"x\"\naudiance = \"y\"\n", "unknown key 'web.oidc.audiance' (did you mean 'audience'?)"),
    ("[web.oauth]\nissuer = \"x\"\n", "unknown section [web.oauth]"),
    ("colour = 1\n", "unknown key 'colour'"),
    ("[egress]\nprivate_allow = \"127.0.0.0/8\"\n", "egress.private_allow must be a list, got a string ('127.0.0.0/8')"),
    ("[approvals]\nquorum = 1.5\n", "approvals.quorum must be an integer, got a number (1.5)"),
    ("[approvals]\nquorum = true\n", "approvals.quorum must be an integer, got true/false (True)"),
    ("[policy]\ndecision_log = \"no\"\n", "policy.decision_log must be true or false, got a string ('no')"),
    ("[proxy]\nlisten = 8080\n", "proxy.listen must be a string, got an integer (8080)"),
    ("egress = [1]\n", "[egress] must be a table, got a list"),
    ("[secrets]\nx = 1\n", "secrets.x must be a table"),
])
def test_unknown_keys_and_wrong_types_are_refused_by_name(tmp_path, text, message):
    with pytest.raises(ValueError) as err:
        load(tmp_path, text)
    assert message in str(err.value)


def test_a_fraction_where_seconds_are_asked_and_every_default_fit_the_schema(tmp_path):
    cfg = load(tmp_path, "[egress]\nhold_timeout_s = 0.5\n[approvals]\nttl_s = 90\n")
    assert cfg.egress.hold_timeout_s == 0.5 and cfg.approvals.ttl_s == 90
    check_document(DEFAULTS)


def test_an_unknown_environment_override_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="unknown key 'egress.privat_allow'"):
        load(tmp_path, "", {"SANDGATE_EGRESS__PRIVAT_ALLOW": "[]"})
    cfg = load(tmp_path, "", {"SANDGATE_EGRESS__HOLD_TIMEOUT_S": "2.5"})
    assert cfg.egress.hold_timeout_s == 2.5


def test_every_key_has_a_meaning_and_a_type():
    def walk(schema):
        for value in schema.values():
            if isinstance(value, dict):
                yield from walk(value)
            else:
                yield value
    keys = list(walk(SCHEMA))
    assert keys and all(isinstance(k, Key) and k.meaning.strip() and k.type for k in keys)


def test_a_value_from_a_file_as_docker_and_kubernetes_mount_secrets(tmp_path):
    """SANDGATE_<SECTION>__<KEY>_FILE: the value is the file's content (the one trailing newline dropped), typed
    like the key; both forms at once, or an unreadable file, refuse to start naming the variable."""
    (tmp_path / "store-url").write_text("postgresql://sandgate:s3cret@db:5432/sandgate?sslmode=require\n")
    (tmp_path / "hold").write_text("45")
    cfg = load(tmp_path, "", {"SANDGATE_STORE__URL_FILE": str(tmp_path / "store-url"),
                              "SANDGATE_EGRESS__HOLD_TIMEOUT_S_FILE": str(tmp_path / "hold")})
    assert cfg.store_url == "postgresql://sandgate:s3cret@db:5432/sandgate?sslmode=require"
    assert cfg.egress.hold_timeout_s == 45
    with pytest.raises(ValueError, match="SANDGATE_STORE__URL_FILE: SANDGATE_STORE__URL is set too"):
        load(tmp_path, "", {"SANDGATE_STORE__URL_FILE": str(tmp_path / "store-url"),
                            "SANDGATE_STORE__URL": "sqlite:///x.db"})
    with pytest.raises(ValueError, match="SANDGATE_VAULT__TOKEN_FILE: cannot read"):
        load(tmp_path, "", {"SANDGATE_VAULT__TOKEN_FILE": str(tmp_path / "missing")})
    # a key that itself ends in _file is that key, not a file reference
    cfg = load(tmp_path, "", {"SANDGATE_API__HARNESS_TOKEN_FILE": "/run/secrets/harness"})
    assert cfg.api.harness_token_file == "/run/secrets/harness"
    with pytest.raises(ValueError, match="unknown key 'egress.nothing_file'"):
        load(tmp_path, "", {"SANDGATE_EGRESS__NOTHING_FILE": str(tmp_path / "hold")})


@pytest.mark.parametrize("text, message", [
    ("[api]\ntrusted_proxies = [\"10.0.0.1/8\"]\n", "api.trusted_proxies: bad CIDR '10.0.0.1/8'"),
    ("[egress]\ndrain_s = -1\n", "egress.drain_s must be a number of seconds, 0 or more"),
])
def test_trusted_proxies_and_drain_are_checked(tmp_path, text, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace(".", r"\.")):
        load(tmp_path, text)
    cfg = load(tmp_path, "[api]\ntrusted_proxies = [\"10.244.0.0/16\"]\n[egress]\ndrain_s = 300\n")
    assert [str(n) for n in cfg.api.trusted_proxies] == ["10.244.0.0/16"] and cfg.egress.drain_s == 300
