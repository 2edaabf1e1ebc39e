"""Through the real proxy: site rules the decision cache once misread, each with a rule denying a marked request.

The cache keys on what the policy reads of the input (gateway/policy/cache.py). When it took less for the read
set than the policy reads, a clean request's allow was served to the marked one (a clean request first), or the
marked request's deny to a clean request of another session (the marked one first). The site files here:
- a `package` line indented with a tab, or with spaces (the old text scan found no package there, took the
  helper rule for one nothing refers to, and dropped what it reads);
- a file starting with a UTF-8 BOM (the same, and regorus refuses the BOM itself: the loader drops it);
- a bracketed key named `"#len"` (the old trie's own length marker: only the number of keys was in the key);
- a bracketed key named `"*"` (the old trie's wildcard: every key was in the key; here in a sandgate of its own,
  since reading every query key would hide the `"#len"` case).
"""
from __future__ import annotations

import shutil

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import ROOT, Sandgate

# case -> (site file name, its text, how a request is marked: (header name, None) or (None, query name))
CASES = {
    "tab": ("tab.rego", "\tpackage site.tab\nimport rego.v1\n"
                        'blocked := object.get(input.request.headers, "x-mode", "") == "block"\n', ("X-Mode", None)),
    "spaces": ("spaces.rego", "    package site.spaces\nimport rego.v1\n"
                              'blocked := object.get(input.request.headers, "x-spaces", "") == "block"\n',
               ("X-Spaces", None)),
    "bom": ("bom.rego", "\ufeffpackage site.bom\nimport rego.v1\n"
                        'blocked := object.get(input.request.headers, "x-bom", "") == "block"\n', ("X-Bom", None)),
    "len": ("len.rego", "package site.len\nimport rego.v1\n"
                        'blocked if input.request.query["#len"] == ["block"]\n', (None, "#len")),
    "star": ("star.rego", "package site.star\nimport rego.v1\n"
                          'blocked if input.request.query["*"] == ["block"]\n', (None, "*")),
}
GROUPS = [("tab", "spaces", "bom", "len"), ("star",)]


def _policies(tmp_path, cases) -> str:
    pol = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", pol, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    site = pol / "site"
    site.mkdir()
    denies = ["package sandgate.egress\nimport rego.v1\n"]
    for case in cases:
        name, text, _ = CASES[case]
        (site / name).write_bytes(text.encode("utf-8"))
        denies.append(f'deny contains {{"code": "site.{case}", "reason": "marked {case}"}} if data.site.{case}.blocked\n')
    (site / "denies.rego").write_text("".join(denies))
    return str(pol)


def _get(url, sess, case, marked: bool):
    header, query = CASES[case][2]
    value = "block" if marked else "fine"
    return requests.get(url, proxies=sess["proxies"], timeout=30, headers={header: value} if header else {},
                        params={query: value} if query else {})


@pytest.mark.parametrize("cases", GROUPS, ids=["+".join(g) for g in GROUPS])
def test_a_marked_request_is_decided_on_what_the_site_rule_reads(tmp_path, upstream, cases):
    cfg = {**LOOPBACK_CONFIG, "policy": {"dir": _policies(tmp_path, cases)}}
    with Sandgate(tmp_path / "sg", cfg) as sg:
        for case in cases:
            # A clean request first: its allow is not served to the marked one.
            one = sg.session(allow=["allowed.test"])
            url = f"http://allowed.test:{upstream.port}/clean-first"
            assert _get(url, one, case, marked=False).status_code == 200, case
            marked = _get(url, one, case, marked=True)
            assert marked.status_code == 403, (case, marked.text)
            assert marked.json()["code"] == f"site.{case}", marked.text
            # The marked request first: its deny is not served to another session's clean request.
            url = f"http://allowed.test:{upstream.port}/marked-first"
            two, three = sg.session(allow=["allowed.test"]), sg.session(allow=["allowed.test"])
            assert _get(url, two, case, marked=True).status_code == 403, case
            clean = _get(url, three, case, marked=False)
            assert clean.status_code == 200, (case, clean.text)
            assert _get(url, two, case, marked=True).status_code == 403, case
