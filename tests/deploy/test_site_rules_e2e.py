"""Site rules shipped as deploy/k8s/site-rules.yaml, mounted the way the kubelet mounts a ConfigMap at
policy.dir's site/ (a hidden timestamped directory, `..data`, links), decide in a real sandgate; a ConfigMap update
(a new directory swapped in by one rename, as the kubelet does it) is applied without a restart."""
from __future__ import annotations

import time

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.deploy.recipes import image_policy_dir, k8s, kubelet_configmap
from tests.support.gateway import Sandgate

pytestmark = pytest.mark.e2e

SHIPPED_HOSTS = '{"pastebin.com", "transfer.sh"}'


def site_rules(hosts: str) -> dict[str, str]:
    data = dict(k8s("ConfigMap", "sandgate-site-rules")["data"])
    assert SHIPPED_HOSTS in data["egress_block.rego"]
    data["egress_block.rego"] = data["egress_block.rego"].replace(SHIPPED_HOSTS, hosts)
    return data


def status_and_code(sess: dict, url: str) -> tuple[int, str | None]:
    r = requests.get(url, proxies=sess["proxies"], timeout=30)
    return r.status_code, (r.json().get("code") if r.status_code == 403 else None)


def test_a_configmap_of_site_rules_decides_and_its_update_applies_live(tmp_path, upstream):
    policies = image_policy_dir(tmp_path)
    kubelet_configmap(policies / "site", site_rules('{"first.test"}'), 1)
    resolve = {**LOOPBACK_CONFIG["egress"]["resolve"], "first.test": ["127.0.0.1"], "second.test": ["127.0.0.1"]}
    cfg = {"egress": {**LOOPBACK_CONFIG["egress"], "resolve": resolve}, "policy": {"dir": str(policies)}}
    with Sandgate(tmp_path / "gw", cfg) as sg:
        sess = sg.session(allow=["first.test", "second.test"])
        first, second = (f"http://{h}:{upstream.port}/" for h in ("first.test", "second.test"))
        assert status_and_code(sess, first) == (403, "site.blocked_host")
        assert status_and_code(sess, second) == (200, None)

        kubelet_configmap(policies / "site", site_rules('{"second.test"}'), 2)
        deadline = time.time() + 30
        while time.time() < deadline and status_and_code(sess, second) != (403, "site.blocked_host"):
            time.sleep(0.2)
        assert status_and_code(sess, second) == (403, "site.blocked_host")
        assert status_and_code(sess, first) == (200, None)
        assert not sorted(p.name for p in (policies / "site").iterdir() if p.name.startswith("..2026"))[:-1]
