"""`sandgate policy test|check|eval` through the real CLI, with `opa test|check|eval` semantics."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest

from tests.support.gateway import ROOT, gateway_cli


def sandgate(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """A real `sandgate` command process, forked from the test process's zygote (its imports already done:
    tests/support/zygote.py), exec'd where it cannot be; a forked one leaves without tearing its modules down
    (gateway_cli's default, SANDGATE_TEST_QUICK_EXIT): the policy commands write only their output."""
    return gateway_cli(*args, input=stdin, cwd=ROOT)


def write(directory, files: dict[str, str]):
    for rel, text in files.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return directory


# An ordinary OPA-style policy: a default rule, net.* builtins, builtins inside sprintf, `with input as`.
ORDINARY = {
    "authz/authz.rego": """
        package authz

        import rego.v1

        default allow := false

        allow if {
            input.user.role == "admin"
        }

        allow if {
            net.cidr_contains("10.0.0.0/8", input.source_ip)
            input.method == "GET"
        }

        message := sprintf("%s from %s (%d roles)", [upper(input.user.name), input.source_ip, count(input.user.roles)])
        """,
    "authz/authz_test.rego": """
        package authz_test

        import rego.v1

        import data.authz

        test_default_is_false if {
            authz.allow == false with input as {"user": {"role": "guest"}, "source_ip": "192.0.2.1"}
        }

        test_admin_allowed if {
            authz.allow with input as {"user": {"role": "admin"}}
        }

        test_internal_get_allowed if {
            authz.allow with input as {"user": {"role": "guest"}, "source_ip": "10.1.2.3", "method": "GET"}
        }

        test_internal_post_denied if {
            not authz.allow with input as {"user": {"role": "guest"}, "source_ip": "10.1.2.3", "method": "POST"}
        }

        test_message_uses_builtins_in_sprintf if {
            m := authz.message with input as {"user": {"name": "ann", "roles": ["a", "b"]}, "source_ip": "10.0.0.9"}
            m == "ANN from 10.0.0.9 (2 roles)"
        }

        test_with_data_override if {
            authz.allow with input as {"user": {"role": "admin"}} with data.unused as 1
        }
        """,
}


def test_ordinary_opa_style_directory_passes(tmp_path):
    proc = sandgate("policy", "test", "-v", str(write(tmp_path, ORDINARY)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "6 passed, 0 failed"
    assert "PASS data.authz_test.test_default_is_false authz/authz_test.rego:7" in lines
    assert "PASS data.authz_test.test_message_uses_builtins_in_sprintf authz/authz_test.rego:23" in lines


def test_without_verbose_only_failures_are_listed(tmp_path):
    proc = sandgate("policy", "test", str(write(tmp_path, ORDINARY)))
    assert proc.returncode == 0 and proc.stdout.strip() == "6 passed, 0 failed"


def test_a_failing_test_is_named_with_file_and_line_and_exits_1(tmp_path):
    files = dict(ORDINARY)
    files["authz/more_test.rego"] = """
        package more_test

        import rego.v1

        import data.authz

        test_guest_allowed_wrongly if {
            authz.allow with input as {"user": {"role": "guest"}}
        }

        test_passes if true
        """
    proc = sandgate("policy", "test", str(write(tmp_path, files)))
    assert proc.returncode == 1, proc.stdout
    assert "FAIL data.more_test.test_guest_allowed_wrongly authz/more_test.rego:7 (undefined)" in proc.stdout
    assert "PASS" not in proc.stdout
    assert proc.stdout.splitlines()[-1] == "7 passed, 1 failed"


def test_an_erroring_test_exits_2(tmp_path):
    files = dict(ORDINARY)
    files["authz/err_test.rego"] = """
        package err_test

        import rego.v1

        conflicting := 1 if input.a
        conflicting := 2 if input.b

        test_conflict_is_an_error if {
            conflicting with input as {"a": true, "b": true}
        }

        test_failure if false
        """
    proc = sandgate("policy", "test", str(write(tmp_path, files)))
    assert proc.returncode == 2, proc.stdout
    assert re.search(r"^ERROR data\.err_test\.test_conflict_is_an_error authz/err_test\.rego:8 \(.*conflict",
                     proc.stdout, re.M), proc.stdout
    assert "FAIL data.err_test.test_failure authz/err_test.rego:12" in proc.stdout
    assert proc.stdout.splitlines()[-1] == "6 passed, 1 failed, 1 errors"      # the error counted once


def test_a_test_erroring_on_a_builtin_is_counted_once(tmp_path):
    """A site rule calling endswith on a null host: the test is an ERROR, counted once (not also a failure)."""
    files = {"site/p.rego": """
        package p

        import rego.v1

        deny contains "x" if endswith(input.host, ".x")
        """, "site/p_test.rego": """
        package p_test

        import rego.v1

        test_null_host if {
            count(data.p.deny) == 0 with input as {"host": null}
        }

        test_ok if count(data.p.deny) == 0 with input as {"host": "a.y"}
        """}
    proc = sandgate("policy", "test", str(write(tmp_path, files)), "-v")
    assert proc.returncode == 2, proc.stdout
    assert re.search(r"^ERROR data\.p_test\.test_null_host site/p_test\.rego:5 \(.*endswith", proc.stdout, re.M)
    assert "FAIL" not in proc.stdout and "PASS data.p_test.test_ok" in proc.stdout
    assert proc.stdout.splitlines()[-1] == "1 passed, 0 failed, 1 errors"


def test_a_policy_that_does_not_parse_exits_2(tmp_path):
    proc = sandgate("policy", "test", str(write(tmp_path, {"p.rego": "package p\nimport rego.v1\nx := {\n"})))
    assert proc.returncode == 2
    assert "p.rego:" in proc.stderr and "Traceback" not in proc.stderr


def test_todo_tests_are_skipped(tmp_path):
    files = dict(ORDINARY)
    files["authz/todo_test.rego"] = "package todo_test\n\nimport rego.v1\n\ntodo_test_later if false\n"
    proc = sandgate("policy", "test", "-v", str(write(tmp_path, files)))
    assert proc.returncode == 0, proc.stdout
    assert "SKIP data.todo_test.todo_test_later authz/todo_test.rego:5" in proc.stdout
    assert proc.stdout.splitlines()[-1] == "6 passed, 0 failed, 1 skipped"


def test_run_selects_tests_by_regex(tmp_path):
    proc = sandgate("policy", "test", "-v", "--run", "internal", str(write(tmp_path, ORDINARY)))
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[-1] == "2 passed, 0 failed"
    assert "test_internal_get_allowed" in proc.stdout and "test_admin_allowed" not in proc.stdout


@pytest.mark.parametrize("args", [["--run", "("], ["/no/such/dir"]])
def test_bad_arguments_are_one_line_and_exit_2(args):
    proc = sandgate("policy", "test", *args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("sandgate policy:")       # after the line naming the directory


def test_prints_are_shown_for_failures(tmp_path):
    proc = sandgate("policy", "test", str(write(tmp_path, {"p_test.rego": """
        package p_test

        import rego.v1

        test_x if {
            print("looking at", input)
            false
        }
        """})))
    assert proc.returncode == 1
    assert "FAIL data.p_test.test_x p_test.rego:5" in proc.stdout and "looking at" in proc.stdout


def test_no_tests_is_not_a_pass(tmp_path):
    proc = sandgate("policy", "test", str(write(tmp_path, {"p.rego": "package p\nimport rego.v1\nx := 1\n"})))
    assert proc.returncode == 1 and "no tests found" in proc.stdout


def test_coverage_reports_lines_per_file(tmp_path):
    proc = sandgate("policy", "test", "--coverage", str(write(tmp_path, ORDINARY)))
    assert proc.returncode == 0
    line = next(l for l in proc.stdout.splitlines() if l.strip().startswith("authz/authz.rego:"))
    assert re.search(r"authz/authz\.rego: 100\.0% \(\d+/\d+\)$", line), proc.stdout
    assert "authz_test.rego" not in proc.stdout.split("coverage:")[1]


def test_shipped_rego_tests_pass_with_coverage_of_at_least_90_percent():
    proc = sandgate("policy", "test", "-v", "--coverage", str(ROOT / "policies"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^\d+ passed, 0 failed$", proc.stdout, re.M)
    assert "PASS data.sandgate.egress_test." in proc.stdout
    total = float(re.search(r"^  total: ([\d.]+)%$", proc.stdout, re.M).group(1))
    assert total >= 90.0, proc.stdout
    for line in proc.stdout.split("coverage:")[1].splitlines():
        if line.strip().startswith("sandgate/") and "_test.rego" not in line:
            assert float(re.search(r": ([\d.]+)%", line).group(1)) >= 80.0, line


# -- check -------------------------------------------------------------------------------------------------

def test_check_names_an_unknown_function_with_file_and_line(tmp_path):
    write(tmp_path, {"a/p.rego": """
        package p

        import rego.v1

        x := 1

        y if {
            crypto.no_such_hash(input.a) == "x"
        }
        """})
    proc = sandgate("policy", "check", str(tmp_path))
    assert proc.returncode == 1
    assert "a/p.rego:8: error: unknown function crypto.no_such_hash" in proc.stdout


def test_check_unknown_function_inside_a_function_never_called(tmp_path):
    write(tmp_path, {"p.rego": "package p\nimport rego.v1\nf(a) := nosuch(a)\n"})
    proc = sandgate("policy", "check", str(tmp_path))
    assert proc.returncode == 1 and "p.rego:3: error: unknown function nosuch" in proc.stdout


def test_check_accepts_functions_defined_by_the_policy_and_imports(tmp_path):
    write(tmp_path, {"lib.rego": "package lib\nimport rego.v1\nf(a) := a + 1\n",
                     "p.rego": "package p\nimport rego.v1\nimport data.lib\nimport data.lib as l2\n"
                               "g(a) := a\nx := lib.f(1) + l2.f(2) + g(3) + data.lib.f(4) + count([1])\n"})
    proc = sandgate("policy", "check", "--strict", str(tmp_path))
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.startswith("ok: 2 modules")


@pytest.mark.parametrize("body, message", [
    ("x if { y > 1 }\n", "p.rego:3: error: use of undefined variable `y` is unsafe"),
    ("x := 1\nx := 2\n", "p.rego:4: error: rule conflicts with rule at p.rego:3:1"),
    ("x := 1\nx contains 2 if true\n", "p.rego:4: error: previous value is not a set"),
    ("f(a) := a\nf(a, b) := a\n", "p.rego:4: error: data.p.f was previously defined with 1 arguments."),
    ("x := {\n", "p.rego:4: error: expecting expression"),
    ("x[i] := 1 if {\n\tsome i in [1]\n\ti > 5\n} else := 2 if {\n\tsome i in [1]\n}\n",
     "p.rego:3: error: else cannot be used on a rule with variables in its head (OPA refuses it)"),
])
def test_check_reports_unsafe_variables_conflicts_and_parse_errors(tmp_path, body, message):
    write(tmp_path, {"p.rego": "package p\nimport rego.v1\n" + body})
    proc = sandgate("policy", "check", str(tmp_path))
    assert proc.returncode == 1
    assert message in proc.stdout, proc.stdout


def test_check_keeps_the_policys_prints_to_itself(tmp_path):
    write(tmp_path, {"p.rego": 'package p\nimport rego.v1\nx if {\n\tprint("hello", input.a)\n}\n'})
    proc = sandgate("policy", "check", str(tmp_path))
    assert proc.returncode == 0 and proc.stderr == "" and proc.stdout.startswith("ok:")


def test_check_strict_reports_unused_imports(tmp_path):
    write(tmp_path, {"p.rego": "package p\nimport rego.v1\nimport data.never.used\nx := 1\n"})
    assert sandgate("policy", "check", str(tmp_path)).returncode == 0
    proc = sandgate("policy", "check", "--strict", str(tmp_path))
    assert proc.returncode == 1 and "p.rego:3: warning: import data.never.used is unused" in proc.stdout


def test_check_shipped_policies_are_clean(tmp_path):
    proc = sandgate("policy", "check", str(ROOT / "policies"))
    assert proc.returncode == 0, proc.stdout
    import shutil

    for rel in ("sandgate/egress.rego", "sandgate/egress_test.rego", "sandgate/lib", "sandgate/config"):
        src, dst = ROOT / "policies" / rel, tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    proc = sandgate("policy", "check", "--strict", str(tmp_path))      # the egress policy and the library
    assert proc.returncode == 0, proc.stdout


def test_check_flags_an_import_that_shadows_a_rule(tmp_path):
    write(tmp_path, {"lib.rego": "package lib.decision\nimport rego.v1\ncombine(a) := a\n",
                     "p.rego": "package p\nimport rego.v1\nimport data.lib.decision\n"
                               "decision := decision.combine(1)\n"})
    proc = sandgate("policy", "check", str(tmp_path))
    assert proc.returncode == 1
    assert "p.rego:3: error: import data.lib.decision shadows the rule decision of package p" in proc.stdout
    write(tmp_path, {"p.rego": "package p\nimport rego.v1\nimport data.lib.decision as decision_lib\n"
                               "decision := decision_lib.combine(1)\n"})
    assert sandgate("policy", "check", str(tmp_path)).returncode == 0


def test_check_strict_prints_metadata_annotation_errors(tmp_path):
    write(tmp_path, {"p.rego": """
        package p

        import rego.v1

        # METADATA
        # title: [unclosed
        a := 1

        # METADATA
        # titel: a typo
        # custom: not-a-mapping
        b := 2

        # METADATA
        # scope: package
        c := 3

        # METADATA
        # title: Fine
        # description: A rule with a good block.
        # custom:
        #   code: p.fine
        d := 4
        """})
    assert sandgate("policy", "check", str(tmp_path)).returncode == 0        # annotations: --strict only
    proc = sandgate("policy", "check", "--strict", str(tmp_path))
    assert proc.returncode == 1
    assert "p.rego:5: error: METADATA is not valid YAML" in proc.stdout
    assert "p.rego:9: error: unknown METADATA key 'titel'" in proc.stdout
    assert "p.rego:9: error: METADATA custom must be a mapping" in proc.stdout
    assert "p.rego:14: error: METADATA scope package must annotate a package line" in proc.stdout
    assert "p.rego:18" not in proc.stdout


def test_check_strict_reports_unused_locals_and_arguments(tmp_path):
    write(tmp_path, {"p.rego": """
        package p

        import rego.v1

        x if {
            y := 1
            z := 2
            z > 0
        }

        f(a, b) := a

        g(_, c) := c
        """})
    proc = sandgate("policy", "check", "--strict", str(tmp_path))
    assert proc.returncode == 1
    assert "p.rego:6: warning: local variable y is assigned but never used" in proc.stdout
    assert "p.rego:11: warning: function argument b is never used" in proc.stdout
    assert "z is" not in proc.stdout and "argument c" not in proc.stdout


# -- eval --------------------------------------------------------------------------------------------------

EGRESS = {"kind": "egress", "session": {"id": "s", "workload": "ephemeral", "allow": ["pypi.org"]},
          "request": {"method": "DELETE", "host": "pypi.org", "port": 443, "path": "/x", "ip_class": ""}}


def test_eval_one_document(tmp_path):
    path = tmp_path / "input.json"
    path.write_text(json.dumps(EGRESS, indent=2))
    proc = sandgate("policy", "eval", "--kind", "egress", "--input", str(path), "--policies", str(ROOT / "policies"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"action": "ask", "reasons": ["DELETE requests need approval"],
                                       "codes": ["egress.method_ask"]}


def test_eval_json_lines_gives_one_decision_line_per_input_line():
    docs = [EGRESS, {**EGRESS, "request": {**EGRESS["request"], "method": "GET"}},
            {**EGRESS, "request": {**EGRESS["request"], "host": "evil.test"}},
            {"decision_id": "d1", "input": {**EGRESS, "request": {**EGRESS["request"], "method": "GET"}},
             "result": {"action": "allow"}}]                   # a decision-log record: its input is replayed
    stdin = "\n".join(json.dumps(d) for d in docs) + "\n\n"
    proc = sandgate("policy", "eval", "--kind", "egress", "--input", "-", stdin=stdin)
    assert proc.returncode == 0, proc.stderr
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [o["decision"]["action"] for o in out] == ["ask", "allow", "deny", "allow"]
    assert out[2]["decision"]["codes"] == ["egress.not_allowlisted"]


def test_eval_json_lines_reports_a_bad_line_and_goes_on():
    stdin = json.dumps(EGRESS) + "\n{not json\n" + json.dumps(EGRESS) + "\n"
    proc = sandgate("policy", "eval", "--kind", "egress", "--input", "-", stdin=stdin)
    assert proc.returncode == 1
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    assert out[0]["decision"]["action"] == "ask" and "line 2" in out[1]["error"]
    assert out[2]["decision"]["action"] == "ask"


def test_eval_explain_names_the_rules_that_added_items():
    doc = {**EGRESS, "session": {**EGRESS["session"], "frozen": True}}
    proc = sandgate("policy", "eval", "--kind", "egress", "--input", "-", "--explain", stdin=json.dumps(doc))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["decision"]["codes"] == ["egress.frozen", "egress.method_ask"]
    by_code = {item["code"]: entry for entry in out["explain"] for item in entry["items"]}
    assert set(by_code) == {"egress.allowed", "egress.method_ask", "egress.frozen"}
    assert by_code["egress.method_ask"]["set"] == "ask"
    assert re.fullmatch(r"sandgate/egress\.rego:\d+", by_code["egress.frozen"]["rule"])
    assert by_code["egress.allowed"]["set"] == "allow"


def test_eval_explain_includes_site_rules(tmp_path):
    import shutil

    pol = tmp_path / "pol"
    shutil.copytree(ROOT / "policies", pol, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    write(pol, {"site/x.rego": """
        package sandgate.egress

        import rego.v1

        deny contains {"code": "site.no_delete", "reason": "no deletes here"} if input.request.method == "DELETE"
        """})
    proc = sandgate("policy", "eval", "--kind", "egress", "--input", "-", "--explain", "--policies", str(pol),
                    stdin=json.dumps(EGRESS))
    out = json.loads(proc.stdout)
    assert out["decision"]["action"] == "deny"
    assert {"set": "deny", "rule": "site/x.rego:5", "items": [{"code": "site.no_delete",
                                                               "reason": "no deletes here"}]} in out["explain"]


def test_building_the_parser_loads_neither_the_engine_nor_the_store():
    """Every sandgate command builds the whole parser: the policy commands must not make them all slow."""
    code = ("import sys, gateway.cli; gateway.cli.build_parser(); "
            "print(sorted(m for m in ('regorus', 'sqlmodel', 'sqlalchemy') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=str(ROOT))
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_check_flags_an_input_import_that_shadows_a_rule(tmp_path):
    from gateway.policy.check import check_source               # in process: the CLI test above covers the wiring
    from gateway.policy.loader import load_policy_dir
    write(tmp_path, {"p.rego": "package p\nimport rego.v1\nimport input.request as decision\n"
                               "decision := 1\nx if decision.host == \"a\"\n"})
    assert any("import input.request shadows the rule decision of package p" in str(f)
               for f in check_source(load_policy_dir(tmp_path)))


def test_check_reports_every_failing_rule_of_a_package_not_only_the_first(tmp_path):
    """check evaluates a package whole, then each rule of a package that failed: two errors in one package are
    both reported, a package that evaluates adds nothing (in process: the CLI tests above cover the wiring)."""
    from gateway.policy.check import check_source
    from gateway.policy.loader import load_policy_dir
    write(tmp_path, {"p.rego": "package p\nimport rego.v1\nx := 1\nx := 2\ny := to_number(\"a\")\nz := 3\n",
                     "q.rego": "package q\nimport rego.v1\nok := data.p.z\n",
                     "p_test.rego": "package p_test\nimport rego.v1\ntest_z if data.p.z == 3\n"
                                    "test_bad if to_number(\"b\")\n"})
    found = [str(f) for f in check_source(load_policy_dir(tmp_path))]
    assert found == ["p.rego:4: error: rule conflicts with rule at p.rego:3:1",
                     "p.rego:5: error: could not parse string as number",
                     "p_test.rego:4: error: could not parse string as number"], found
