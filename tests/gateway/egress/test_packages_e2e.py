"""The package firewall end to end: a real sandgate, a PyPI index and an npm registry on loopback serving real
package files (built by the test), an OSV file written by the test, and the real pip and npm through the proxy.

The registries answer as pypi.org, files.pythonhosted.org and registry.npmjs.org (egress.resolve maps the names
to loopback; the proxy trusts their certificate by egress.upstream_ca), and as a mirror with an Artifactory-like
path prefix and gzip-compressed documents (egress.package_registries)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
import requests

from tests.conftest import need_binary
from tests.support.cli import run_cli
from tests.support.gateway import Sandgate
from tests.support.registries import Registry, RegistryServer
from tests.support.upstream import make_cert

NAMES = ["pypi.org", "files.pythonhosted.org", "registry.npmjs.org", "mirror.test"]
PREFIX = "/artifactory/api/pypi/remote"
REASON_PIP = "PyPI evilpkg 1.1.0 is a known malicious package (MAL-TEST-1)"
REASON_NPM = "npm @acme/widget 1.1.0 is a known malicious package (MAL-TEST-2)"


def osv_records() -> list[dict]:
    return [
        {"id": "MAL-TEST-1", "modified": "2025-01-01T00:00:00Z", "summary": "Malicious code in evilpkg (PyPI)",
         "affected": [{"package": {"ecosystem": "PyPI", "name": "EvilPkg"}, "versions": ["1.1.0"]}]},
        {"id": "MAL-TEST-2", "modified": "2025-01-01T00:00:00Z", "summary": "Malicious code in @acme/widget (npm)",
         "affected": [{"package": {"ecosystem": "npm", "name": "@acme/widget"},
                       "ranges": [{"type": "SEMVER", "events": [{"introduced": "1.1.0"}, {"fixed": "1.2.0"}]}]}]},
    ]


def make_registry(prefix: str = "", gzip: bool = False, json_index: bool = True) -> Registry:
    reg = Registry(prefix=prefix, gzip=gzip)
    reg.add_pypi("evilpkg", "1.0.0")
    reg.add_pypi("evilpkg", "1.1.0", sdist=True)
    reg.add_pypi("laterpkg", "2.0.0")
    reg.add_npm("@acme/widget", "1.0.0")
    reg.add_npm("@acme/widget", "1.1.0", tag="latest")
    reg.add_npm("@acme/widget", "1.2.0-beta.1", tag="next")
    reg.json_index = json_index
    return reg


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("packages")
    cert = make_cert(tmp / "certs", NAMES)
    public, mirror = make_registry(), make_registry(prefix=PREFIX, gzip=True, json_index=False)
    public.files_host = "files.pythonhosted.org"
    with RegistryServer(public, tls=cert) as pub, RegistryServer(mirror, tls=cert) as mir:
        resolve = {n: ["127.0.0.1"] for n in NAMES}
        config = {"egress": {"private_allow": ["127.0.0.0/8"], "resolve": resolve, "upstream_ca": cert.cert,
                             "package_registries": [{"host": "mirror.test", "ecosystem": "PyPI"},
                                                    {"host": "mirror.test", "ecosystem": "npm"}]}}
        with Sandgate(tmp / "sg", config) as sg:
            osv = tmp / "osv"
            osv.mkdir()
            for record in osv_records():
                (osv / f"{record['id']}.json").write_text(json.dumps(record))
            load = packages_cli(sg, "load", str(osv))
            assert load.returncode == 0, load.stderr
            wait_for_revision(sg, pub.port)
            yield sg, pub.port, mir.port, public, tmp


def packages_cli(sg: Sandgate, *args: str) -> subprocess.CompletedProcess:
    """`sandgate packages ARGS` on the running sandgate's config and data dir, in this process (run_cli: the
    command's real processes are tests/gateway/packages/test_cli.py's)."""
    extra = {k: v for k, v in sg.env.items() if os.environ.get(k) != v}
    return run_cli("packages", *args, "--config", str(sg.config_path), "--data-dir", str(sg.data_dir), env=extra)


def session_env(sg: Sandgate, tmp: Path, allow: list[str]) -> dict:
    ca = tmp / f"ca-{time.monotonic_ns()}.pem"
    sess = sg.session(workload="persistent", allow=allow, ca_path=str(ca))
    ca.write_text(sess["ca_pem"])
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and not k.startswith(("PIP_", "npm_"))}
    env.update(sess["env"])
    env["HOME"] = str(tmp)
    env["TEST_SESSION"] = sess["id"]
    return env


def wait_for_revision(sg: Sandgate, port: int, timeout: float = 10.0) -> None:
    """Until the running proxy denies the listed download (its index took the load in: no restart)."""
    env = session_env(sg, sg.tmp, ["files.pythonhosted.org"])
    url = f"https://files.pythonhosted.org:{port}/packages/evilpkg/evilpkg-1.1.0-py3-none-any.whl"
    deadline = time.time() + timeout
    while time.time() < deadline:
        resp = requests.get(url, proxies={"https": env["HTTPS_PROXY"]}, verify=env["SSL_CERT_FILE"], timeout=10)
        if resp.status_code == 403:
            return
        time.sleep(0.2)
    raise AssertionError("the running sandgate did not take the load in")


def pip(env: dict, target: Path, index: str, *reqs: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check", "--no-deps",
           "--retries", "0", "--timeout", "20", "--target", str(target), "--index-url", index, *reqs]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)


def installed(target: Path) -> list[str]:
    return sorted(p.name for p in target.glob("*.dist-info")) if target.exists() else []


# -- pip -------------------------------------------------------------------------------------------------------

def test_pip_pinned_malicious_version_fails_with_the_reason(world):
    sg, port, _mport, public, tmp = world
    env = session_env(sg, tmp, ["pypi.org", "files.pythonhosted.org"])
    out = pip(env, tmp / "pinned", f"https://pypi.org:{port}/simple/", "evilpkg==1.1.0")
    assert out.returncode != 0
    text = out.stdout + out.stderr
    # pip picks a yanked file when pinned with == (PEP 592) and fetches it while resolving: the proxy's refusal,
    # with its reason in the status line, is what it prints.
    assert "403" in text and f"Forbidden by sandgate: {REASON_PIP}" in text, text
    assert installed(tmp / "pinned") == []
    denied = [e for e in sg.events(env["TEST_SESSION"]) if "package.malicious" in e["codes"]]
    assert denied and denied[0]["action"] == "deny" and denied[0]["host"] == "files.pythonhosted.org"


def test_pip_unpinned_resolves_to_the_clean_version(world):
    sg, port, _mport, public, tmp = world
    env = session_env(sg, tmp, ["pypi.org", "files.pythonhosted.org"])
    out = pip(env, tmp / "unpinned", f"https://pypi.org:{port}/simple/", "evilpkg")
    assert out.returncode == 0, out.stdout + out.stderr
    assert installed(tmp / "unpinned") == ["evilpkg-1.0.0.dist-info"]
    # The index pip read was PEP 691 JSON (it asks for it first), fetched unencoded and unconditional.
    seen = [h for m, p, h in public.seen if p.startswith("/simple/evilpkg")]
    assert seen and all(h.get("accept-encoding") == "identity" and "if-none-match" not in h for h in seen)


def get(env: dict, url: str, **headers: str) -> requests.Response:
    return requests.get(url, proxies={"https": env["HTTPS_PROXY"]}, verify=env["SSL_CERT_FILE"], timeout=10,
                        headers=headers)


def test_pypi_index_documents_mark_the_listed_files_yanked(world):
    sg, port, mport, _public, tmp = world
    env = session_env(sg, tmp, ["pypi.org", "mirror.test"])
    reason = "sandgate: evilpkg 1.1.0 is a known malicious package (MAL-TEST-1)"
    doc = get(env, f"https://pypi.org:{port}/simple/evilpkg/", Accept="application/vnd.pypi.simple.v1+json").json()
    yanked = {f["filename"]: f.get("yanked") for f in doc["files"]}
    assert yanked == {"evilpkg-1.0.0-py3-none-any.whl": None, "evilpkg-1.1.0-py3-none-any.whl": reason,
                      "evilpkg-1.1.0.tar.gz": reason}
    api = get(env, f"https://pypi.org:{port}/pypi/evilpkg/json").json()
    assert api["info"]["yanked"] is True and api["info"]["yanked_reason"] == reason
    assert [f["yanked"] for f in api["releases"]["1.0.0"]] == [False]
    page = get(env, f"https://mirror.test:{mport}{PREFIX}/simple/evilpkg/", **{"Accept-Encoding": "gzip"})
    anchors = HtmlAnchors.of(page.text)
    assert anchors == {"evilpkg-1.0.0-py3-none-any.whl": None, "evilpkg-1.1.0-py3-none-any.whl": reason,
                       "evilpkg-1.1.0.tar.gz": reason}
    other = get(env, f"https://pypi.org:{port}/simple/laterpkg/", Accept="application/vnd.pypi.simple.v1+json")
    assert other.headers.get("etag")                    # a package no advisory names passes as it came


class HtmlAnchors(HTMLParser):
    """file name -> its data-yanked attribute (None when absent), parsed as pip parses the page."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, str | None] = {}

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            a = dict(attrs)
            self.found[a["href"].split("#")[0].rsplit("/", 1)[-1]] = a.get("data-yanked")

    @classmethod
    def of(cls, text: str) -> dict[str, str | None]:
        parser = cls()
        parser.feed(text)
        return parser.found


def test_pip_through_a_mirror_with_a_path_prefix_and_gzip(world):
    sg, _port, mport, _public, tmp = world
    env = session_env(sg, tmp, ["mirror.test"])
    index = f"https://mirror.test:{mport}{PREFIX}/simple/"
    pinned = pip(env, tmp / "mirror-pinned", index, "evilpkg==1.1.0")
    assert pinned.returncode != 0 and REASON_PIP in pinned.stdout + pinned.stderr
    unpinned = pip(env, tmp / "mirror-unpinned", index, "evilpkg")
    assert unpinned.returncode == 0, unpinned.stdout + unpinned.stderr
    assert installed(tmp / "mirror-unpinned") == ["evilpkg-1.0.0.dist-info"]


# -- npm -------------------------------------------------------------------------------------------------------

def npm(env: dict, prefix: Path, registry: str, spec: str) -> subprocess.CompletedProcess:
    binary = need_binary("npm")
    prefix.mkdir(parents=True, exist_ok=True)
    cmd = [binary, "install", spec, "--registry", registry, "--prefix", str(prefix), "--no-audit", "--no-fund",
           "--cache", str(prefix / ".cache"), "--fetch-retries", "0", "--no-update-notifier"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env, cwd=prefix)


def npm_version(prefix: Path, name: str) -> str | None:
    manifest = prefix / "node_modules" / name / "package.json"
    return json.loads(manifest.read_text())["version"] if manifest.exists() else None


def test_npm_pinned_scoped_malicious_version_fails_with_the_reason(world):
    sg, port, _mport, _public, tmp = world
    env = session_env(sg, tmp, ["registry.npmjs.org"])
    out = npm(env, tmp / "npm-pinned", f"https://registry.npmjs.org:{port}/", "@acme/widget@1.1.0")
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "403" in text and REASON_NPM in text, text
    assert npm_version(tmp / "npm-pinned", "@acme/widget") is None


def test_npm_range_resolves_to_the_clean_version(world):
    sg, port, _mport, _public, tmp = world
    env = session_env(sg, tmp, ["registry.npmjs.org"])
    out = npm(env, tmp / "npm-range", f"https://registry.npmjs.org:{port}/", "@acme/widget@^1.0.0")
    assert out.returncode == 0, out.stdout + out.stderr
    assert npm_version(tmp / "npm-range", "@acme/widget") == "1.0.0"
    latest = npm(env, tmp / "npm-latest", f"https://registry.npmjs.org:{port}/", "@acme/widget")
    assert latest.returncode == 0, latest.stdout + latest.stderr
    assert npm_version(tmp / "npm-latest", "@acme/widget") == "1.0.0"


def test_npm_packument_marks_and_moves_tags(world):
    sg, port, _mport, _public, tmp = world
    env = session_env(sg, tmp, ["registry.npmjs.org"])
    resp = requests.get(f"https://registry.npmjs.org:{port}/@acme%2fwidget", proxies={"https": env["HTTPS_PROXY"]},
                        verify=env["SSL_CERT_FILE"], timeout=10, headers={"Accept-Encoding": "gzip"})
    doc = resp.json()
    assert doc["versions"]["1.1.0"]["deprecated"] == f"sandgate: @acme/widget 1.1.0 is a known malicious package (MAL-TEST-2)"
    assert "deprecated" not in doc["versions"]["1.0.0"]
    assert "deprecated" in doc["versions"]["1.2.0-beta.1"]      # a prerelease inside [1.1.0, 1.2.0) is listed too
    assert doc["dist-tags"] == {"latest": "1.0.0", "next": "1.0.0"}


# -- the store: loads and exceptions reach the running proxy -------------------------------------------------------

def test_a_site_exception_lets_one_version_through_and_is_audited(world):
    sg, port, _mport, _public, tmp = world
    env = session_env(sg, tmp, ["pypi.org", "files.pythonhosted.org"])
    url = f"https://files.pythonhosted.org:{port}/packages/evilpkg/evilpkg-1.1.0-py3-none-any.whl"
    get = lambda: requests.get(url, proxies={"https": env["HTTPS_PROXY"]}, verify=env["SSL_CERT_FILE"], timeout=10)
    first = get()
    assert first.status_code == 403 and first.json()["code"] == "package.malicious"
    assert first.json()["reason"] == REASON_PIP
    allow = packages_cli(sg, "allow", "pypi", "EvilPkg", "1.1.0", "--reason", "vetted by security")
    assert allow.returncode == 0, allow.stderr
    try:
        deadline = time.time() + 10
        while get().status_code != 200:
            assert time.time() < deadline, "the exception did not reach the running proxy"
            time.sleep(0.2)
        check = packages_cli(sg, "check", "PyPI", "evilpkg", "1.1.0")
        assert check.returncode == 0 and "site exception" in check.stdout
    finally:
        assert packages_cli(sg, "allow", "PyPI", "evilpkg", "1.1.0", "--remove").returncode == 0
    deadline = time.time() + 10
    while get().status_code != 403:
        assert time.time() < deadline, "the withdrawn exception still lets the file through"
        time.sleep(0.2)
    admin = sg.token("admin", "root")
    rows = sg.call("GET", "/v1/events?kind=package.allow", token=admin).json()
    allowed = [r for r in rows if r["kind"] == "package.allow"]
    assert [r["action"] for r in allowed] == ["allow", "revoke"]
