"""A PyPI simple index and an npm registry on loopback, serving real package files built here.

`Registry(root)` serves, on one threaded HTTP(S) server (any Host name: tests map the public registry names to it
with `egress.resolve`):
- PyPI: `/simple/NAME/` (PEP 503 HTML, or PEP 691 JSON for `Accept: application/vnd.pypi.simple.v1+json`),
  `/pypi/NAME/json` (the JSON API) and the files at `/packages/NAME/FILE`;
- npm: packuments at `/NAME` and `/@scope%2fname` (full JSON; abbreviated for `Accept:
  application/vnd.npm.install-v1+json`), tarballs at `/NAME/-/BASE-VERSION.tgz`.
`prefix` puts everything under a path (a mirror's shape, e.g. `/artifactory/api/pypi/remote`). Packages are real:
wheels (zip with dist-info, installable by pip), sdists (tar.gz with PKG-INFO) and npm tarballs (package/package.json)
with their sha256 / sha1 / sha512 integrity. `gzip=True` compresses documents when the client accepts it.
"""
from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import ssl
import tarfile
import threading
import zipfile
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote

from packaging.utils import canonicalize_name

from tests.support.upstream import CertPair


def build_wheel(name: str, version: str) -> tuple[str, bytes]:
    dist = name.replace("-", "_")
    module = dist.lower()
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": f'VERSION = "{version}"\n'.encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: sandgate-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for path, data in files.items()) + f"{info}/RECORD,,\n"
    files[f"{info}/RECORD"] = record.encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return f"{dist}-{version}-py3-none-any.whl", buf.getvalue()


def build_sdist(name: str, version: str) -> tuple[str, bytes]:
    base = f"{name.replace('-', '_')}-{version}"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for path, data in {f"{base}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
                           f"{base}/setup.py": b"raise SystemExit('never built in these tests')\n"}.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return f"{base}.tar.gz", buf.getvalue()


def build_npm_tarball(name: str, version: str) -> bytes:
    manifest = json.dumps({"name": name, "version": version, "main": "index.js"}).encode()
    index = f"module.exports = {json.dumps(version)};\n".encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for path, data in {"package/package.json": manifest, "package/index.js": index}.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = 0o644
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@dataclass
class Registry:
    prefix: str = ""
    gzip: bool = False
    json_index: bool = True                    # answer PEP 691 JSON to clients that ask for it (else HTML only)
    files_host: str = ""                       # PyPI files linked on this host (e.g. files.pythonhosted.org)
    pypi: dict[str, dict[str, list[tuple[str, bytes]]]] = field(default_factory=dict)   # name -> ver -> files
    npm: dict[str, dict[str, bytes]] = field(default_factory=dict)                      # name -> ver -> tarball
    npm_tags: dict[str, dict[str, str]] = field(default_factory=dict)
    seen: list[tuple[str, str, dict]] = field(default_factory=list)                     # (method, path, headers)

    def add_pypi(self, name: str, version: str, sdist: bool = False) -> None:
        files = self.pypi.setdefault(canonicalize_name(name), {}).setdefault(version, [])
        files.append(build_wheel(name, version))
        if sdist:
            files.append(build_sdist(name, version))

    def add_npm(self, name: str, version: str, tag: str | None = None) -> None:
        self.npm.setdefault(name, {})[version] = build_npm_tarball(name, version)
        if tag:
            self.npm_tags.setdefault(name, {})[tag] = version

    # -- documents -----------------------------------------------------------------------------------------
    def simple_html(self, name: str, base: str) -> bytes:
        links = []
        for version, files in self.pypi[name].items():
            for filename, data in files:
                digest = hashlib.sha256(data).hexdigest()
                links.append(f'    <a href="{base}{self.prefix}/packages/{name}/{filename}#sha256={digest}" '
                             f'data-requires-python="&gt;=3.8">{filename}</a><br/>')
        return ("<!DOCTYPE html>\n<html>\n  <head><title>Links for " + name + "</title></head>\n  <body>\n"
                + "\n".join(links) + "\n  </body>\n</html>\n").encode()

    def simple_json(self, name: str, base: str) -> bytes:
        files = [{"filename": fn, "url": f"{base}{self.prefix}/packages/{name}/{fn}",
                  "hashes": {"sha256": hashlib.sha256(data).hexdigest()}, "requires-python": ">=3.8"}
                 for _v, fs in self.pypi[name].items() for fn, data in fs]
        return json.dumps({"meta": {"api-version": "1.1"}, "name": name, "files": files,
                           "versions": list(self.pypi[name])}).encode()

    def json_api(self, name: str, base: str) -> bytes:
        releases = {v: [{"filename": fn, "url": f"{base}{self.prefix}/packages/{name}/{fn}", "yanked": False,
                         "yanked_reason": None} for fn, _d in fs] for v, fs in self.pypi[name].items()}
        latest = list(self.pypi[name])[-1]
        return json.dumps({"info": {"name": name, "version": latest, "yanked": False, "yanked_reason": None},
                           "releases": releases, "urls": releases[latest]}).encode()

    def packument(self, name: str, base: str, abbreviated: bool) -> bytes:
        versions = {}
        unscoped = name.rsplit("/", 1)[-1]
        for version, data in self.npm[name].items():
            tarball = f"{base}{self.prefix}/{name}/-/{unscoped}-{version}.tgz"
            dist = {"tarball": tarball, "shasum": hashlib.sha1(data).hexdigest(),
                    "integrity": "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()}
            manifest = {"name": name, "version": version, "dist": dist, "main": "index.js"}
            if not abbreviated:
                manifest["description"] = f"{name} for tests"
            versions[version] = manifest
        tags = dict(self.npm_tags.get(name) or {"latest": list(self.npm[name])[-1]})
        doc = {"name": name, "dist-tags": tags, "versions": versions}
        if not abbreviated:
            doc["time"] = {v: "2025-01-01T00:00:00.000Z" for v in versions}
        return json.dumps(doc).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        reg = self.server.registry
        reg.seen.append(("GET", self.path, {k.lower(): v for k, v in self.headers.items()}))
        host = self.headers.get("Host", "")
        base = f"{self.server.scheme}://{host}"
        files_base = f"{self.server.scheme}://{reg.files_host}:{self.server.server_address[1]}" if reg.files_host \
            else base
        path = self.path.split("?", 1)[0]
        if reg.prefix and not path.startswith(reg.prefix + "/"):
            return self._send(404, b"not here\n", "text/plain")
        path = path[len(reg.prefix):]
        parts = [unquote(p) for p in path.strip("/").split("/")]
        accept = self.headers.get("Accept", "")
        if parts[:1] == ["simple"] and len(parts) == 2 and canonicalize_name(parts[1]) in reg.pypi:
            name = canonicalize_name(parts[1])
            if reg.json_index and "application/vnd.pypi.simple.v1+json" in accept:
                return self._send(200, reg.simple_json(name, files_base), "application/vnd.pypi.simple.v1+json")
            return self._send(200, reg.simple_html(name, files_base), "text/html; charset=utf-8")
        if parts[:1] == ["pypi"] and len(parts) == 3 and parts[2] == "json" and parts[1] in reg.pypi:
            return self._send(200, reg.json_api(parts[1], files_base), "application/json")
        if parts[:1] == ["packages"] and len(parts) == 3 and parts[1] in reg.pypi:
            for files in reg.pypi[parts[1]].values():
                for filename, data in files:
                    if filename == parts[2]:
                        return self._send(200, data, "application/octet-stream", document=False)
            return self._send(404, b"no such file\n", "text/plain")
        joined = "/".join(parts)
        if "/-/" in joined:
            name, _, filename = joined.partition("/-/")
            unscoped = name.rsplit("/", 1)[-1]
            for version, data in reg.npm.get(name, {}).items():
                if filename == f"{unscoped}-{version}.tgz":
                    return self._send(200, data, "application/octet-stream", document=False)
            return self._send(404, b'{"error":"not found"}', "application/json")
        if joined in reg.npm:
            abbreviated = "application/vnd.npm.install-v1+json" in accept
            return self._send(200, reg.packument(joined, base, abbreviated),
                              "application/vnd.npm.install-v1+json" if abbreviated else "application/json")
        self._send(404, b'{"error":"not found"}', "application/json")

    def _send(self, status: int, payload: bytes, ctype: str, document: bool = True) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if document and self.server.registry.gzip and "gzip" in self.headers.get("Accept-Encoding", ""):
            payload = gzip.compress(payload)
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("ETag", '"' + hashlib.sha1(payload).hexdigest() + '"')
        self.end_headers()
        self.wfile.write(payload)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    registry: Registry
    scheme: str


class RegistryServer:
    """`with RegistryServer(registry, tls=cert) as srv:` -> srv.port."""

    def __init__(self, registry: Registry, tls: CertPair | None = None, host: str = "127.0.0.1"):
        self.server = _Server((host, 0), _Handler)
        self.server.registry = registry
        self.server.scheme = "https" if tls is not None else "http"
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls.cert, tls.key)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "RegistryServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def quote_npm(name: str) -> str:
    """An npm name as the npm client puts it in a packument URL (`@scope%2fname`)."""
    return quote(name, safe="@")
