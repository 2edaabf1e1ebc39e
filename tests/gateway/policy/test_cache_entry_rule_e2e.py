"""Through the real proxy: a site's own policy directory whose `decision` reads the input itself (no tool-call
package, no other rule naming it) decides each request on that input (regression: the decision cache's scan
took `decision` for a rule nothing reaches, keyed on nothing, and served the first request's allow to every
later request)."""
from __future__ import annotations

import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import Sandgate

POLICY = """package sandgate.egress
import rego.v1

verdicts := {"allowed.test": "allow"}

decision := {"action": object.get(verdicts, input.request.host, "deny"), "reasons": ["site list"], "codes": ["site.list"]}
"""


def test_each_request_is_decided_on_its_own_host(tmp_path, upstream):
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "egress.rego").write_text(POLICY)
    cfg = {**LOOPBACK_CONFIG, "policy": {"dir": str(policies)}}
    with Sandgate(tmp_path / "sg", cfg) as sg:
        sess = sg.session(allow=["allowed.test", "other.test"])
        proxies = {"http": sess["proxy_url"]}
        assert requests.get(f"http://allowed.test:{upstream.port}/a", proxies=proxies, timeout=10).status_code == 200
        other = requests.get(f"http://other.test:{upstream.port}/b", proxies=proxies, timeout=10)
        assert other.status_code == 403 and other.headers.get("X-Sandgate-Decision") == "deny", other.text
        assert requests.get(f"http://allowed.test:{upstream.port}/c", proxies=proxies, timeout=10).status_code == 200
