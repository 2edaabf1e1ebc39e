"""Two sandgate processes on one store (as two replicas would be): sessions made or ended on one hold on both."""
from __future__ import annotations

import shutil
import time

import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import Sandgate


def test_second_replica_sees_sessions_of_the_first(tmp_path, upstream):
    store = f"sqlite:///{tmp_path / 'shared.db'}"
    cfg = {**LOOPBACK_CONFIG, "store": {"url": store}}
    with Sandgate(tmp_path / "a", cfg) as a:
        b = Sandgate(tmp_path / "b", cfg)
        b.data_dir.mkdir(parents=True)
        shutil.copy(a.data_dir / "signing.key", b.data_dir / "signing.key")   # one key for the deployment
        with b:
            sess = a.session(allow=["allowed.test"])
            via_b = {"http": sess["proxy_url"].replace(f":{a.proxy_port}", f":{b.proxy_port}")}
            url = f"http://allowed.test:{upstream.port}/replica"
            assert requests.get(url, proxies=via_b, timeout=10).status_code == 200
            assert a.call("DELETE", f"/v1/sessions/{sess['id']}").status_code == 204
            deadline = time.time() + 15
            while time.time() < deadline:
                if requests.get(url, proxies=via_b, timeout=10).status_code == 407:
                    break
                time.sleep(0.5)
            else:
                raise AssertionError("replica b kept serving a session deleted on a")
