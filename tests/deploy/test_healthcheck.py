"""deploy/healthcheck.py's address logic (the whole check runs against real replicas in test_recipe_e2e.py)."""
from __future__ import annotations

import importlib.util
import json

import pytest

from tests.deploy.recipes import DEPLOY

_spec = importlib.util.spec_from_file_location("sandgate_healthcheck", DEPLOY / "healthcheck.py")
healthcheck = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(healthcheck)


@pytest.mark.parametrize("api,url", [
    ("0.0.0.0:8700", "http://127.0.0.1:8700/healthz"),
    ("127.0.0.1:9000", "http://127.0.0.1:9000/healthz"),
    ("10.1.2.3:8700", "http://10.1.2.3:8700/healthz"),
    ("[::]:8700", "http://[::1]:8700/healthz"),
    ("::1:8700", "http://[::1]:8700/healthz"),
    ("[fd00::5]:8700", "http://[fd00::5]:8700/healthz"),
    (":8700", "http://127.0.0.1:8700/healthz"),
])
def test_health_url(api, url):
    assert healthcheck.health_url(json.dumps({"api": api, "proxy": "0.0.0.0:8080"})) == url


@pytest.mark.parametrize("text", ["", "{}", '{"api": "nohostport"}', '{"api": "h:notaport"}', "[1]"])
def test_bad_listen_files_raise_what_the_check_catches(text):
    with pytest.raises((ValueError, KeyError, TypeError)):
        healthcheck.health_url(text)


@pytest.mark.parametrize("status, body, exit_code", [
    (200, {"status": "ok"}, 0),
    (200, {"status": "degraded", "audit": {"status": "degraded"}}, 0),    # alive: a restart would lose rows
    (503, {"status": "degraded"}, 1),
    (200, {"status": "starting"}, 1),
    (200, "not json", 1),
])
def test_the_check_passes_ok_and_degraded_as_the_docs_say(tmp_path, status, body, exit_code):
    """The script itself, against a real HTTP server on loopback that answers as /healthz would."""
    import subprocess
    import sys
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            data = (json.dumps(body) if isinstance(body, dict) else body).encode()
            self.send_response(status if self.path == "/healthz" else 404)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        (tmp_path / "listen.json").write_text(json.dumps({"api": f"127.0.0.1:{server.server_address[1]}"}))
        proc = subprocess.run([sys.executable, str(DEPLOY / "healthcheck.py")], capture_output=True, text=True,
                              timeout=30, env={"SANDGATE_DATA_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"})
    finally:
        server.shutdown()
        server.server_close()
    assert proc.returncode == exit_code, proc.stderr
    if body != {"status": "ok"}:
        assert proc.stderr.startswith("sandgate-healthcheck:")
