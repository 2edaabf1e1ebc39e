"""A small API client for the CLI commands that talk to a running sandgate (`approvals`, `secrets`,
`token revoke`): urllib, JSON in and out, the status as the server gave it."""
from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

UNREACHABLE = (urllib.error.URLError, OSError)


class ApiClient:
    def __init__(self, base: str, token: str):
        self.base = base.rstrip("/")
        self.token = token

    @classmethod
    def from_args(cls, default_url: str, api_url: str | None, token: str | None) -> "ApiClient":
        """`--api-url` (else the configured API), `--token` (else $SANDGATE_TOKEN)."""
        return cls(api_url or default_url, token or os.environ.get("SANDGATE_TOKEN", ""))

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - the configured API URL
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw)
            except ValueError:
                return exc.code, {"error": "http_error", "detail": raw.decode(errors="replace")[:200]}


def print_result(status: int, body: Any) -> int:
    """Print a JSON answer (0), or one `sandgate: STATUS CODE: DETAIL` line on stderr (1)."""
    if status >= 400:
        detail = body.get("detail", "") if isinstance(body, dict) else ""
        code = body.get("error", "error") if isinstance(body, dict) else "error"
        print(f"sandgate: {status} {code}: {detail}", file=sys.stderr)
        return 1
    if body is not None:
        print(json.dumps(body, indent=2))
    return 0
