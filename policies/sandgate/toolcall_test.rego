# Tests of toolcall.rego: the call as a whole (tools, files, HTTP, SQL, messages, deploys, frozen, history).
# Inputs are written by hand; tests/gateway/toolcalls/ runs the same policy on inputs sandgate builds.
package sandgate.toolcall_test

import rego.v1

import data.sandgate.toolcall

session := {
	"id": "s1", "workload": "persistent", "labels": {}, "frozen": false, "age_s": 1,
	"allow": ["example.com", "*.corp.test"], "workspace": "/workspace", "secrets": [], "stats": {},
}

frozen_session := object.union(session, {"frozen": true})

# path facts as describe_path builds them
path(raw, extra) := object.union({
	"raw": raw, "normalized": concat("/", ["/workspace", raw]), "in_workspace": true, "is_root": false,
	"is_home": false, "is_workspace_parent": false, "dynamic": false, "glob": false, "device": false,
	"via_link": "",
}, extra)

outside(raw) := path(raw, {"normalized": raw, "in_workspace": false})

call(name, args, extra) := object.union({
	"kind": "toolcall", "session": session, "tool": {"name": name, "args": args}, "step": 1,
	"history": [],
}, extra)

# a shell call whose one command is `name` (read-only facts unless extra says otherwise)
shell_call(name, extra, sess) := {
	"kind": "toolcall", "session": sess, "tool": {"name": "shell", "args": {"command": name}}, "step": 1,
	"history": [], "shell": {"parsed": true, "commands": [object.union({
		"argv": [name], "op": "", "effective": [name], "redirects": [], "name": name, "operands": [],
		"flags": [], "options": {}, "dynamic": false, "cwd": path(".", {"normalized": "/workspace"}),
		"paths": [], "writes": [], "deletes": [], "moves": [],
	}, extra)]},
}

history(entries) := [object.union({"id": "t", "step": 1, "age_s": 1, "tool": "shell", "summary": "x",
	"decision": "allow", "codes": [], "frozen": false, "writes": []}, e) | some e in entries]

# -- known, unknown and invalid tools ---------------------------------------------------------------------

test_allow_read_tool if {
	d := toolcall.decision with input as call("read_file", {"path": "a"}, {"path": path("a", {})})
	d.action == "allow"
	d.codes == ["toolcall.read"]
}

test_allow_read_tool_outside_workspace if {
	d := toolcall.decision with input as call("read_file", {"path": "/etc/hosts"}, {"path": outside("/etc/hosts")})
	d.codes == ["toolcall.read"]
}

test_ask_unknown_tool if {
	d := toolcall.decision with input as call("launch_rocket", {}, {})
	d.action == "ask"
	d.codes == ["toolcall.unknown_tool"]
	d.reasons == ["unknown tool launch_rocket needs approval"]
}

test_deny_missing_tool_name if {
	d := toolcall.decision with input as {"kind": "toolcall"}
	d.action == "deny"
	d.codes == ["toolcall.invalid_input"]
}

test_ask_without_configuration if {
	d := toolcall.decision with input as call("read_file", {"path": "a"}, {"path": path("a", {})})
		with data.sandgate.config.toolcall as {}
	d.action == "ask"
	"toolcall.no_config" in d.codes
}

test_mcp_calls_are_not_judged_by_name if {
	d := toolcall.decision with input as call("launch_rocket", {}, {"mcp": {"server": "x", "annotations": {}}})
	not "toolcall.unknown_tool" in d.codes
	not "toolcall.read" in d.codes
}

test_mcp_shell_named_tool_is_not_a_shell if {
	inp := object.union(shell_call("rm", {"paths": [path("/", {"is_root": true, "in_workspace": false})]}, session), {"mcp": {"server": "x", "annotations": {}}})
	d := toolcall.decision with input as inp
	not "toolcall.delete_root" in d.codes
}

# -- file tools ---------------------------------------------------------------------------------------------

test_ask_path_tool_without_path if {
	d := toolcall.decision with input as call("write_file", {"content": "x"}, {})
	"toolcall.unparsed" in d.codes
	d.action == "ask"
}

test_ask_delete_file_inside if {
	d := toolcall.decision with input as call("delete_file", {"path": "a"}, {"path": path("a", {})})
	d.action == "ask"
	d.codes == ["toolcall.delete"]
}

test_deny_delete_file_outside if {
	d := toolcall.decision with input as call("delete_file", {"path": "/etc/passwd"}, {"path": outside("/etc/passwd")})
	d.action == "deny"
	d.codes == ["toolcall.delete_outside_workspace"]
	d.reasons == ["delete target /etc/passwd is outside the workspace"]
}

test_deny_delete_file_home if {
	d := toolcall.decision with input as call("delete_file", {"path": "~"}, {"path": object.union(outside("~"), {"is_home": true})})
	d.codes == ["toolcall.delete_home"]
}

test_deny_delete_file_home_through_link if {
	p := object.union(outside("h"), {"normalized": "~", "is_home": true, "via_link": "/workspace/h"})
	d := toolcall.decision with input as call("delete_file", {"path": "h"}, {"path": p})
	d.reasons == ["delete target h (through /workspace/h) is a home directory"]
}

test_ask_delete_file_unknown_path if {
	p := object.union(outside("$X"), {"normalized": "", "dynamic": true})
	d := toolcall.decision with input as call("delete_file", {"path": "$X"}, {"path": p})
	d.codes == ["toolcall.delete"]
}

test_allow_write_file_inside if {
	d := toolcall.decision with input as call("write_file", {"path": "a"}, {"path": path("a", {})})
	d.action == "allow"
	d.codes == ["toolcall.write"]
}

test_ask_write_file_outside if {
	d := toolcall.decision with input as call("write_file", {"path": "/etc/x"}, {"path": outside("/etc/x")})
	d.codes == ["toolcall.write_outside_workspace"]
	d.reasons == ["writing /etc/x outside the workspace needs approval"]
}

test_deny_write_file_device if {
	d := toolcall.decision with input as call("write_file", {"path": "/dev/sda"}, {"path": object.union(outside("/dev/sda"), {"device": true})})
	d.codes == ["toolcall.device"]
}

test_ask_write_file_missing_facts if {
	d := toolcall.decision with input as call("write_file", {"path": "a"}, {"path": {"raw": "a"}})
	d.codes == ["toolcall.write_outside_workspace"]
}

# -- deploys, messages, HTTP --------------------------------------------------------------------------------

test_ask_deploy_tool if {
	d := toolcall.decision with input as call("deploy", {"target": "prod"}, {})
	d.codes == ["toolcall.deploy"]
}

test_ask_message_tool if {
	d := toolcall.decision with input as call("send_email", {"to": "a"}, {})
	d.codes == ["toolcall.external_write"]
}

url(host, port) := {"parsed": true, "scheme": "https", "host": host, "port": port, "path": "/", "query": {}}

test_allow_post_to_allowlisted_host if {
	d := toolcall.decision with input as call("http_request", {"method": "POST", "url": "u"}, {"url": url("example.com", 443)})
	d.codes == ["toolcall.write"]
}

test_ask_post_elsewhere if {
	d := toolcall.decision with input as call("http_request", {"method": "post", "url": "u"}, {"url": url("evil.test", 443)})
	d.codes == ["toolcall.external_write"]
	d.reasons == ["POST to a host outside the allow list needs approval"]
}

test_ask_delete_to_allowlisted_host if {
	d := toolcall.decision with input as call("http_request", {"method": "DELETE", "url": "u"}, {"url": url("example.com", 443)})
	d.codes == ["toolcall.delete"]
	d.reasons == ["an HTTP DELETE needs approval"]
}

test_allow_get_elsewhere if {
	d := toolcall.decision with input as call("http_request", {"method": "GET", "url": "u"}, {"url": url("evil.test", 443)})
	d.codes == ["toolcall.read"]
}

test_ask_get_to_metadata_address if {
	u := object.union(url("169.254.169.254", 80), {"ip_class": "link_local"})
	d := toolcall.decision with input as call("http_request", {"method": "GET", "url": "u"}, {"url": u})
	d.action == "ask"
	d.codes == ["toolcall.internal_address"]
}

test_allow_get_to_public_address if {
	u := object.union(url("93.184.215.14", 443), {"ip_class": "public"})
	d := toolcall.decision with input as call("http_request", {"method": "GET", "url": "u"}, {"url": u})
	d.codes == ["toolcall.read"]
}

test_ask_unparsed_url if {
	d := toolcall.decision with input as call("http_request", {"method": "GET", "url": "x"}, {"url": {"parsed": false}})
	d.codes == ["toolcall.unparsed"]
}

test_ask_non_string_method if {
	d := toolcall.decision with input as call("http_request", {"method": 5, "url": "u"}, {"url": url("evil.test", 443)})
	d.codes == ["toolcall.external_write"]
}

# -- SQL ----------------------------------------------------------------------------------------------------

sql(s) := call("sql", {"query": "q"}, {"sql": object.union({"parsed": true, "kinds": [], "unbounded": [], "visible": true}, s)})

test_allow_sql_select if {
	d := toolcall.decision with input as sql({"kinds": ["SELECT"]})
	d.codes == ["toolcall.read"]
}

test_allow_sql_insert if {
	d := toolcall.decision with input as sql({"kinds": ["INSERT"]})
	d.codes == ["toolcall.write"]
}

test_ask_sql_drop if {
	d := toolcall.decision with input as sql({"kinds": ["DROP"]})
	d.codes == ["toolcall.delete"]
	d.reasons == ["SQL DROP deletes data"]
}

test_ask_sql_update_without_where if {
	d := toolcall.decision with input as sql({"kinds": ["UPDATE"], "unbounded": ["UPDATE"]})
	d.codes == ["toolcall.sql_unbounded"]
}

test_ask_sql_unknown_kind if {
	d := toolcall.decision with input as sql({"kinds": ["CALL"]})
	d.codes == ["toolcall.sql_unknown"]
}

test_ask_sql_unparsed if {
	d := toolcall.decision with input as sql({"parsed": false})
	d.codes == ["toolcall.unparsed"]
}

test_ask_sql_invisible if {
	d := toolcall.decision with input as sql({"visible": false})
	d.codes == ["toolcall.sql_invisible"]
}

test_ask_sql_other_kind_names_what if {
	d := toolcall.decision with input as sql({"kinds": ["ALTER"], "kind": "other", "unsafe": ["ALTER ... RENAME"]})
	d.action == "ask"
	"toolcall.sql_unknown" in d.codes
	contains(concat(" ", d.reasons), "ALTER ... RENAME")
}

test_ask_sql_delete_kind if {
	d := toolcall.decision with input as sql({"kinds": ["MERGE"], "kind": "delete", "unsafe": ["MERGE ... DELETE"]})
	"toolcall.delete" in d.codes
}

test_sql_functions_and_settings_from_the_tables if {
	read := {"kinds": ["SELECT"], "kind": "read"}
	ok := toolcall.decision with input as sql(object.union(read, {"functions": ["lower"], "settings": ["search_path"]}))
	ok.action == "allow"
	fn := toolcall.decision with input as sql(object.union(read, {"functions": ["dblink_exec"]}))
	fn.codes == ["toolcall.sql_function"]
	st := toolcall.decision with input as sql(object.union(read, {"settings": ["role"]}))
	st.codes == ["toolcall.sql_setting"]
	site := toolcall.decision with input as sql(object.union(read, {"functions": ["dblink_exec"]}))
		with data.sandgate.config.toolcall.sql_safe_functions as {"dblink_exec": true}
	site.action == "allow"
}

test_ask_sql_missing_facts if {
	d := toolcall.decision with input as call("sql", {"query": "q"}, {})
	d.codes == ["toolcall.no_facts"]
}

test_ask_url_missing_facts if {
	d := toolcall.decision with input as call("http_request", {"url": "https://x.test/"}, {})
	d.codes == ["toolcall.no_facts"]
}

test_ask_url_unparsed if {
	d := toolcall.decision with input as call("http_request", {"url": "::"}, {"url": {"parsed": false}})
	"toolcall.unparsed" in d.codes
}

# -- frozen sessions ----------------------------------------------------------------------------------------

test_allow_frozen_read if {
	d := toolcall.decision with input as call("read_file", {"path": "a"}, {"path": path("a", {}), "session": frozen_session})
	d.codes == ["toolcall.read"]
}

test_ask_frozen_write_file if {
	d := toolcall.decision with input as call("write_file", {"path": "a"}, {"path": path("a", {}), "session": frozen_session})
	d.codes == ["toolcall.frozen"]
	d.reasons == ["the session is frozen: write_file needs approval"]
}

test_ask_frozen_http_post if {
	d := toolcall.decision with input as call("http_request", {"method": "POST", "url": "u"}, {"url": url("example.com", 443), "session": frozen_session})
	d.codes == ["toolcall.frozen"]
}

test_ask_frozen_sql_insert if {
	d := toolcall.decision with input as object.union(sql({"kinds": ["INSERT"]}), {"session": frozen_session})
	d.codes == ["toolcall.frozen"]
}

test_allow_frozen_sql_select if {
	d := toolcall.decision with input as object.union(sql({"kinds": ["SELECT"]}), {"session": frozen_session})
	d.codes == ["toolcall.read"]
}

test_ask_frozen_shell_write if {
	d := toolcall.decision with input as shell_call("make", {}, frozen_session)
	d.codes == ["toolcall.frozen"]
	d.reasons == ["the session is frozen: make needs approval"]
}

test_allow_frozen_shell_read if {
	d := toolcall.decision with input as shell_call("ls", {}, frozen_session)
	d.codes == ["toolcall.read"]
}

# -- history ------------------------------------------------------------------------------------------------

test_ask_delete_right_after_freeze_lifted if {
	inp := object.union(call("delete_file", {"path": "a"}, {"path": path("a", {})}), {"history": history([{"frozen": true}])})
	d := toolcall.decision with input as inp
	d.codes == ["toolcall.after_freeze", "toolcall.delete"]
}

test_no_after_freeze_once_calls_passed if {
	inp := object.union(call("delete_file", {"path": "a"}, {"path": path("a", {})}), {"history": history([{"frozen": true}, {}])})
	d := toolcall.decision with input as inp
	d.codes == ["toolcall.delete"]
}

test_no_after_freeze_for_reads if {
	inp := object.union(call("read_file", {"path": "a"}, {"path": path("a", {})}), {"history": history([{"frozen": true}])})
	d := toolcall.decision with input as inp
	d.codes == ["toolcall.read"]
}

test_after_freeze_window_is_tunable if {
	inp := object.union(call("deploy", {}, {}), {"history": history([{"frozen": true}, {}])})
	d := toolcall.decision with input as inp with data.sandgate.config.toolcall.after_freeze_calls as 2
	d.codes == ["toolcall.after_freeze", "toolcall.deploy"]
}

test_ask_after_a_denial_streak if {
	inp := object.union(call("write_file", {"path": "a"}, {"path": path("a", {})}), {"history": history([{"decision": "deny"}, {"decision": "deny"}, {"decision": "deny"}])})
	d := toolcall.decision with input as inp
	d.codes == ["toolcall.after_denials"]
	d.reasons == ["the last 3 tool calls were denied: this one needs approval"]
}

test_allow_after_a_broken_denial_streak if {
	inp := object.union(call("write_file", {"path": "a"}, {"path": path("a", {})}), {"history": history([{"decision": "deny"}, {"decision": "allow"}, {"decision": "deny"}])})
	d := toolcall.decision with input as inp
	d.codes == ["toolcall.write"]
}

test_reads_pass_a_denial_streak if {
	inp := object.union(call("read_file", {"path": "a"}, {"path": path("a", {})}), {"history": history([{"decision": "deny"}, {"decision": "deny"}, {"decision": "deny"}])})
	d := toolcall.decision with input as inp
	d.codes == ["toolcall.read"]
}

test_denial_streak_off if {
	inp := object.union(call("write_file", {"path": "a"}, {"path": path("a", {})}), {"history": history([{"decision": "deny"}, {"decision": "deny"}, {"decision": "deny"}])})
	d := toolcall.decision with input as inp with data.sandgate.config.toolcall.denial_streak as 0
	d.codes == ["toolcall.write"]
}

# -- budgets -------------------------------------------------------------------------------------------------

test_spent_budget_asks_even_for_a_read if {
	spent := object.union(session, {"budgets_spent": ["requests", "toolcalls"]})
	d := toolcall.decision with input as call("read_file", {"path": "a"}, {"path": path("a", {}), "session": spent})
	d.action == "ask"
	"budget.exceeded" in d.codes
	"the session spent its requests, toolcalls budget: every tool call needs approval" in d.reasons
}

test_no_budget_spent_reads_are_allowed if {
	fresh := object.union(session, {"budgets_spent": [], "budgets": {"toolcalls": 3}})
	d := toolcall.decision with input as call("read_file", {"path": "a"}, {"path": path("a", {}), "session": fresh})
	d.action == "allow"
}
