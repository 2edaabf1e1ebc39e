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


# Found trying every section as a new user would: each was accepted (started as if fine), or refused without
# naming the key.
@pytest.mark.parametrize("text, message", [
    ("[policy]\nworkers = 0\n", "policy.workers must be an integer >= 1"),
    ("[policy]\nworkers = -3\n", "policy.workers must be an integer >= 1"),
    ("[policy]\ntimeout_s = 0\n", "policy.timeout_s must be a positive number"),
    ("[policy]\ntimeout_s = -1\n", "policy.timeout_s must be a positive number"),
    ("[policy]\ntimeout_s = nan\n", "policy.timeout_s must be a finite number"),
    ("[egress]\nhold_timeout_s = inf\n", "egress.hold_timeout_s must be a finite number"),
    ("[broker]\ncache_ttl_s = -5\n", "broker.cache_ttl_s must be a number of seconds >= 0"),
    ("[approvals]\nttl_s = -1\n", "approvals.ttl_s must be a positive number"),
    ("[approvals]\nquorum = 0\n", "approvals.quorum must be an integer >= 1"),
    ("[egress]\nprivate_allow = [\"10.0.0.0/33\"]\n", "egress.private_allow: bad CIDR '10.0.0.0/33'"),
    ("[proxy]\ntransparent_listen = \"127.0.0.1:1\"\ndns_listen = \"127.0.0.1:2\"\ntransparent_sources = [\"x\"]\n",
     "proxy.transparent_sources: bad CIDR 'x'"),
    ("[egress]\npassthrough = [\"https://x.test/\"]\n", "egress.passthrough: allow entry 'https://x.test/'"),
    ("[api]\nlisten = \"nope\"\n", "api.listen: bad listen address 'nope'"),
    ("[proxy]\npostgres_listen = \"nope\"\n", "proxy.postgres_listen: bad listen address 'nope'"),
    ("[proxy]\nadvertise_url = \"not a url at all\"\n", "proxy.advertise_url must be HOST:PORT"),
    ("[egress.resolve]\n\"a.test\" = [\"nope\"]\n", "egress.resolve: 'nope' (for a.test) is not an IP address"),
    ("[[egress.package_registries]]\nhost = \"pypi.corp\"\necosytem = \"PyPI\"\n",
     "egress.package_registries: unknown key 'ecosytem'"),
    ("[store]\nurl = \"mysql://x\"\n", "store.url must be sqlite:///PATH or postgresql://"),
    ("[vault]\nurl = \"not a url\"\n", "vault.url must be an http(s) URL"),
    ("[web.oidc]\nissuer = \"not a url\"\naudience = \"a\"\n", "web.oidc.issuer must be an http(s) URL"),
    ("[web.oidc]\nissuer = \"https://id.test\"\n", "web.oidc.issuer and web.oidc.audience go together"),
    ("[proxy]\npostgres_listen = \"127.0.0.1:6432\"\n[databases.main]\nupstream = \"127.0.0.1:5432\"\ndbname = \"d\"\n"
     "user = \"u\"\npassword = \"env:P\"\nhold_timeout_s = nan\n", "databases.main.hold_timeout_s must be a positive number"),
    ("[databases.main]\nupstream = \"127.0.0.1:5432\"\ndbname = \"d\"\nuser = \"u\"\npassword = \"env:P\"\n",
     "databases.main: the PostgreSQL gateway is off: set proxy.postgres_listen"),
    ("[egress]\nupstream_ca = \"/nonexistent.pem\"\n", "egress.upstream_ca: no such file '/nonexistent.pem'"),
])
def test_every_section_refuses_a_bad_value_by_name(tmp_path, text, message):
    with pytest.raises(ValueError) as err:
        load(tmp_path, text)
    assert message in str(err.value)


@pytest.mark.parametrize("env, message", [
    ({"SANDGATE_EGRESS__PRIVATE_ALLOW": "10.0.0.0/8"}, 'a JSON list, e.g. ["a", "b"]'),
    ({"SANDGATE_POLICY__WORKERS": "abc"}, "SANDGATE_POLICY__WORKERS: want a number"),
    ({"SANDGATE_POLICY__TIMEOUT_S": "nan"}, "policy.timeout_s must be a finite number"),
])
def test_an_environment_override_of_the_wrong_type_is_named(tmp_path, env, message):
    with pytest.raises(ValueError) as err:
        load(tmp_path, "", env)
    assert message in str(err.value)


def test_good_values_of_the_checked_keys_still_load(tmp_path):
    cfg = load(tmp_path, "[policy]\nworkers = 1\ntimeout_s = 0.5\n[broker]\ncache_ttl_s = 0\n[approvals]\nttl_s = 0.5\n"
                         "[egress.resolve]\n\"a.test\" = [\"192.0.2.1\", \"2001:db8::1\"]\n"
                         "[store]\nurl = \"postgresql+psycopg://u@h/d\"\n[vault]\nurl = \"https://vault.test:8200\"\n"
                         "[proxy]\nadvertise_url = \"http://sandgate.internal:3128\"\n"
                         "[web.oidc]\nissuer = \"https://id.test\"\naudience = \"a\"\n")
    assert cfg.policy.workers == 1 and cfg.approvals.ttl_s == 0.5 and cfg.oidc is not None


def test_a_bad_log_level_is_a_usage_error_not_a_traceback(monkeypatch, capsys):
    from gateway.cli.commands import build_parser
    for argv, env in ((["serve", "--log-level", "LOUD"], None), (["serve"], "LOUD")):
        if env:
            monkeypatch.setenv("SANDGATE_LOG_LEVEL", env)
        with pytest.raises(SystemExit) as exc:
            build_parser().parse_args(argv)
        assert exc.value.code == 2 and "'LOUD' is not a log level" in capsys.readouterr().err
    monkeypatch.setenv("SANDGATE_LOG_LEVEL", "debug")
    assert build_parser().parse_args(["serve"]).log_level == "DEBUG"


def test_a_ca_bundle_without_a_certificate_is_refused(tmp_path):
    (tmp_path / "ca.pem").write_text("not a certificate\n")
    with pytest.raises(ValueError, match="egress.upstream_ca: .* holds no PEM certificate"):
        load(tmp_path, f"[egress]\nupstream_ca = \"{tmp_path / 'ca.pem'}\"\n")
