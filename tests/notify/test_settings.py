"""`[notify]` and `web.public_url`: bad settings refuse to start, naming the key; the URL is never echoed."""
from __future__ import annotations

import pytest

from gateway.config import load_config

URL = "https://hooks.example/services/T000/B000/SECRETPART"


def test_defaults_are_off():
    cfg = load_config(environ={})
    assert cfg.notify.webhook_url == "" and cfg.notify.format == "json"


def test_json_with_a_secret_source():
    cfg = load_config(environ={}, overrides={"notify": {"webhook_url": URL, "secret": "env:HOOK_KEY"},
                                             "web": {"public_url": "https://gate.example/"}})
    assert cfg.notify.secret == "env:HOOK_KEY" and cfg.notify.public_url == "https://gate.example"


@pytest.mark.parametrize("notify,web,needle", [
    ({"webhook_url": URL}, {}, "notify.secret is required"),
    ({"webhook_url": URL, "secret": "env:NOT A NAME"}, {}, "notify.secret"),
    ({"webhook_url": URL, "secret": "vault:no-key"}, {}, "notify.secret"),
    ({"format": "xml"}, {}, "notify.format"),
    ({"webhook_url": "ftp://hooks.example/SECRETPART", "secret": "env:K"}, {}, "notify.webhook_url"),
    ({}, {"public_url": "gate.example"}, "web.public_url"),
    ({"timeout_s": 0}, {}, "notify.timeout_s"),
    ({"timeout_s": 60}, {}, "notify.timeout_s"),
    ({"max_outbox": 0}, {}, "notify.max_outbox"),
    ({"colour": "red"}, {}, "notify.colour"),
])
def test_bad_settings_refuse_to_start(notify, web, needle):
    with pytest.raises(ValueError) as exc:
        load_config(environ={}, overrides={"notify": notify, "web": web})
    assert needle in str(exc.value)
    assert "SECRETPART" not in str(exc.value)


def test_slack_needs_no_secret_and_no_public_url():
    cfg = load_config(environ={}, overrides={"notify": {"webhook_url": URL, "format": "slack"}})
    assert cfg.notify.format == "slack" and cfg.notify.secret == "" and cfg.notify.public_url == ""


def test_a_literal_key_is_the_key():
    cfg = load_config(environ={}, overrides={"notify": {"webhook_url": URL, "secret": "s3cret"}})
    assert cfg.notify.secret == "s3cret"
