package sandgate.toolcall_test

import rego.v1

import data.sandgate.toolcall

# Inputs are written by hand here: the shell facts (name, operands, flags, paths...) come from Python.
# Tests call toolcall.decide directly; never `with` (regopy crashes on it for dependent rules).

sess(extra) := object.union({"id": "s1", "workload": "persistent", "labels": {}, "frozen": false, "age_s": 1, "allow": ["example.com", "*.corp.test"], "workspace": "/workspace", "secrets": [], "stats": {}}, extra)

pinfo(raw, extra) := object.union({"raw": raw, "normalized": concat("/", ["/workspace", raw]), "in_workspace": true, "is_root": false, "is_home": false, "is_workspace_parent": false, "dynamic": false, "glob": false}, extra)

outside(raw) := pinfo(raw, {"normalized": raw, "in_workspace": false})

cmd(argv, extra) := object.union({
	"argv": argv, "op": "", "effective": argv, "redirects": [], "name": argv[0],
	"operands": [w | some w in array.slice(argv, 1, count(argv)); not startswith(w, "-")],
	"flags": [w | some w in argv; startswith(w, "-")],
	"paths": [], "writes": [], "dynamic": false, "cwd": pinfo(".", {"normalized": "/workspace"}),
}, extra)

shell(cmds, s) := {"kind": "toolcall", "session": sess(s), "tool": {"name": "shell", "args": {"command": "(hand-written)"}}, "step": 1, "shell": {"parsed": true, "commands": cmds}}

tool(name, args, extra) := object.union({"kind": "toolcall", "session": sess({}), "tool": {"name": name, "args": args}, "step": 1}, extra)

frozen_tool(name, args, extra) := object.union(tool(name, args, extra), {"session": sess({"frozen": true})})

# -- reads ------------------------------------------------------------------------------------------------

test_allow_ls if {
	d := toolcall.decide(shell([cmd(["ls", "-la"], {})], {}))
	d.action == "allow"
	d.codes == ["toolcall.read"]
}

test_allow_frozen_ls if {
	d := toolcall.decide(shell([cmd(["ls"], {})], {"frozen": true}))
	d.action == "allow"
	d.codes == ["toolcall.read"]
}

test_allow_frozen_git_status if {
	d := toolcall.decide(shell([cmd(["git", "status"], {})], {"frozen": true}))
	d.codes == ["toolcall.read"]
}

test_allow_read_file if {
	d := toolcall.decide(tool("read_file", {"path": "/etc/hosts"}, {"path": outside("/etc/hosts")}))
	d.action == "allow"
	d.codes == ["toolcall.read"]
}

test_allow_unmatched_command_is_write if {
	d := toolcall.decide(shell([cmd(["make", "build"], {})], {}))
	d.action == "allow"
	d.codes == ["toolcall.write"]
}

test_allow_empty_command_list if {
	d := toolcall.decide(shell([], {}))
	d.codes == ["toolcall.read"]
}

# -- deletes ----------------------------------------------------------------------------------------------

test_ask_rm_in_workspace if {
	d := toolcall.decide(shell([cmd(["rm", "-rf", "build/"], {"paths": [pinfo("build", {})]})], {}))
	d.action == "ask"
	d.codes == ["toolcall.delete"]
}

test_ask_rm_without_targets if {
	d := toolcall.decide(shell([cmd(["rm"], {})], {}))
	d.codes == ["toolcall.delete"]
}

test_deny_rm_root if {
	d := toolcall.decide(shell([cmd(["rm", "-rf", "/"], {"paths": [pinfo("/", {"normalized": "/", "in_workspace": false, "is_root": true, "is_workspace_parent": true})]})], {}))
	d.action == "deny"
	d.codes == ["toolcall.delete_root"]
}

test_deny_rm_home_among_others if {
	paths := [pinfo("a", {}), pinfo("~/", {"normalized": "~", "in_workspace": false, "is_home": true})]
	d := toolcall.decide(shell([cmd(["rm", "-rf", "a", "~/"], {"paths": paths})], {}))
	d.action == "deny"
	d.codes == ["toolcall.delete_home"]
}

test_deny_rm_home_only_flag if {
	d := toolcall.decide(shell([cmd(["rm", "-rf", "$HOME"], {"paths": [{"raw": "$HOME", "is_home": true}]})], {}))
	d.codes == ["toolcall.delete_home"]
}

test_deny_rm_workspace_parent if {
	d := toolcall.decide(shell([cmd(["rm", "-rf", ".."], {"paths": [pinfo("..", {"normalized": "/", "in_workspace": false, "is_workspace_parent": true})]})], {}))
	d.codes == ["toolcall.delete_workspace_parent"]
}

test_deny_rm_glob_after_cd_root if {
	cd := cmd(["cd", "/"], {})
	rm := cmd(["rm", "-rf", "*"], {"op": "&&", "paths": [outside("/*")]})
	d := toolcall.decide(shell([cd, rm], {}))
	d.action == "deny"
	d.codes == ["toolcall.delete_outside_workspace"]
}

test_ask_rm_dynamic_target if {
	d := toolcall.decide(shell([cmd(["rm", "-rf", "$X"], {"paths": [{"raw": "$X", "in_workspace": false, "dynamic": true}]})], {}))
	d.action == "ask"
	d.codes == ["toolcall.delete"]
}

test_ask_rm_target_missing_facts if {
	d := toolcall.decide(shell([cmd(["rm", "x"], {"paths": [{"raw": "x"}]})], {}))
	d.action == "ask"
}

test_ask_find_delete if {
	d := toolcall.decide(shell([cmd(["find", ".", "-delete"], {"paths": [pinfo(".", {})]})], {}))
	d.codes == ["toolcall.delete"]
}

test_deny_find_exec_rm_outside if {
	d := toolcall.decide(shell([cmd(["find", "/tmp", "-exec", "rm", "{}", ";"], {"exec_names": ["rm"], "paths": [outside("/tmp")]})], {}))
	d.codes == ["toolcall.delete_outside_workspace"]
}

test_allow_find_read if {
	d := toolcall.decide(shell([cmd(["find", ".", "-name", "x"], {"paths": [pinfo(".", {})]})], {"frozen": true}))
	d.codes == ["toolcall.read"]
}

test_ask_git_clean if {
	d := toolcall.decide(shell([cmd(["git", "clean", "-fdx"], {})], {}))
	d.codes == ["toolcall.delete"]
}

test_deny_git_clean_in_root if {
	d := toolcall.decide(shell([cmd(["git", "clean", "-fdx"], {"cwd": pinfo(".", {"normalized": "/", "in_workspace": false, "is_root": true})})], {}))
	d.codes == ["toolcall.delete_root"]
}

test_ask_git_reset_hard if {
	d := toolcall.decide(shell([cmd(["git", "reset", "--hard"], {})], {}))
	d.codes == ["toolcall.delete"]
}

test_ask_delete_file_inside if {
	d := toolcall.decide(tool("delete_file", {"path": "a.txt"}, {"path": pinfo("a.txt", {})}))
	d.action == "ask"
	d.codes == ["toolcall.delete"]
}

test_deny_delete_file_outside if {
	d := toolcall.decide(tool("delete_file", {"path": "/etc/x"}, {"path": outside("/etc/x")}))
	d.action == "deny"
	d.codes == ["toolcall.delete_outside_workspace"]
}

test_ask_delete_file_missing_path if {
	d := toolcall.decide(tool("delete_file", {}, {}))
	d.action == "ask"
	d.codes == ["toolcall.unparsed", "toolcall.delete"]
}

test_ask_codes_are_unique if {
	d := toolcall.decide(shell([cmd(["rm", "a"], {}), cmd(["rm", "b"], {"op": ";"})], {}))
	d.codes == ["toolcall.delete"]
	count(d.reasons) == 2
}

# -- SQL --------------------------------------------------------------------------------------------------

test_allow_sql_select if {
	d := toolcall.decide(tool("sql", {"query": "SELECT 1"}, {"sql": {"parsed": true, "kinds": ["SELECT"]}}))
	d.codes == ["toolcall.read"]
}

test_allow_sql_insert if {
	d := toolcall.decide(tool("sql", {"query": "INSERT ..."}, {"sql": {"parsed": true, "kinds": ["INSERT"]}}))
	d.action == "allow"
	d.codes == ["toolcall.write"]
}

test_ask_sql_drop if {
	d := toolcall.decide(tool("sql", {"query": "DROP TABLE x"}, {"sql": {"parsed": true, "kinds": ["DROP"]}}))
	d.action == "ask"
	d.codes == ["toolcall.delete"]
}

test_ask_sql_unparsed if {
	d := toolcall.decide(tool("sql", {"query": "SELEC"}, {"sql": {"parsed": false, "kinds": []}}))
	d.codes == ["toolcall.unparsed"]
}

test_ask_sql_missing_facts if {
	d := toolcall.decide(tool("sql", {"query": "SELECT 1"}, {}))
	d.action == "ask"
	d.codes == ["toolcall.unparsed"]
}

test_ask_sql_unknown_kind if {
	d := toolcall.decide(tool("sql", {"query": "CALL p()"}, {"sql": {"parsed": true, "kinds": ["CALL"]}}))
	d.codes == ["toolcall.sql_unknown"]
}

test_ask_frozen_sql_insert if {
	d := toolcall.decide(frozen_tool("sql", {"query": "INSERT ..."}, {"sql": {"parsed": true, "kinds": ["INSERT"]}}))
	d.codes == ["toolcall.frozen"]
}

test_allow_frozen_sql_select if {
	d := toolcall.decide(frozen_tool("sql", {"query": "SELECT 1"}, {"sql": {"parsed": true, "kinds": ["SELECT"]}}))
	d.action == "allow"
}

test_ask_frozen_psql_drop if {
	c := cmd(["psql", "-c", "DROP TABLE x"], {"operands": [], "sql": {"parsed": true, "kinds": ["DROP"]}})
	d := toolcall.decide(shell([c], {"frozen": true}))
	d.action == "ask"
	d.codes == ["toolcall.delete", "toolcall.frozen"]
}

test_allow_frozen_psql_select if {
	c := cmd(["psql", "-c", "SELECT 1"], {"operands": [], "sql": {"parsed": true, "kinds": ["SELECT"]}})
	d := toolcall.decide(shell([c], {"frozen": true}))
	d.codes == ["toolcall.read"]
}

# -- deploys ----------------------------------------------------------------------------------------------

test_ask_kubectl_apply if {
	d := toolcall.decide(shell([cmd(["kubectl", "apply", "-f", "x.yaml"], {"operands": ["apply"]})], {}))
	d.action == "ask"
	d.codes == ["toolcall.deploy"]
}

test_allow_kubectl_get if {
	d := toolcall.decide(shell([cmd(["kubectl", "get", "pods"], {})], {"frozen": true}))
	d.codes == ["toolcall.read"]
}

test_ask_terraform_destroy if {
	d := toolcall.decide(shell([cmd(["terraform", "destroy"], {})], {}))
	d.codes == ["toolcall.deploy"]
}

test_ask_gcloud_run_deploy if {
	d := toolcall.decide(shell([cmd(["gcloud", "run", "deploy", "svc"], {})], {}))
	d.codes == ["toolcall.deploy"]
}

test_ask_vercel_bare if {
	d := toolcall.decide(shell([cmd(["vercel"], {})], {}))
	d.codes == ["toolcall.deploy"]
}

test_ask_vercel_prod if {
	d := toolcall.decide(shell([cmd(["vercel", "--prod"], {})], {}))
	d.codes == ["toolcall.deploy"]
}

test_ask_heroku if {
	d := toolcall.decide(shell([cmd(["heroku", "releases:rollback"], {})], {}))
	d.codes == ["toolcall.deploy"]
}

test_ask_git_push_plus_refspec if {
	d := toolcall.decide(shell([cmd(["git", "push", "origin", "+main"], {})], {}))
	d.codes == ["toolcall.deploy"]
}

test_ask_git_push_force if {
	d := toolcall.decide(shell([cmd(["git", "push", "--force", "origin", "feature"], {})], {}))
	d.codes == ["toolcall.deploy"]
}

test_ask_git_push_main if {
	d := toolcall.decide(shell([cmd(["git", "push", "origin", "HEAD:refs/heads/main"], {})], {}))
	d.codes == ["toolcall.deploy"]
}

test_ask_git_push_no_refspec if {
	d := toolcall.decide(shell([cmd(["git", "push"], {})], {}))
	d.codes == ["toolcall.deploy"]
}

test_ask_git_push_delete_branch if {
	d := toolcall.decide(shell([cmd(["git", "push", "origin", ":feature"], {})], {}))
	d.codes == ["toolcall.deploy"]
}

test_allow_git_push_feature if {
	d := toolcall.decide(shell([cmd(["git", "push", "-u", "origin", "feature"], {})], {}))
	d.action == "allow"
	d.codes == ["toolcall.write"]
}

test_ask_frozen_git_push_feature if {
	d := toolcall.decide(shell([cmd(["git", "push", "origin", "feature"], {})], {"frozen": true}))
	d.codes == ["toolcall.frozen"]
}

test_ask_deploy_tool if {
	d := toolcall.decide(tool("deploy", {"target": "prod"}, {}))
	d.action == "ask"
	d.codes == ["toolcall.deploy"]
}

# -- external writes --------------------------------------------------------------------------------------

url(host, port) := {"parsed": true, "scheme": "https", "host": host, "port": port, "path": "/", "query": {}}

test_allow_http_post_allowlisted if {
	d := toolcall.decide(tool("http_request", {"method": "POST", "url": "https://example.com/"}, {"url": url("example.com", 443)}))
	d.action == "allow"
	d.codes == ["toolcall.write"]
}

test_allow_http_post_wildcard if {
	d := toolcall.decide(tool("http_request", {"method": "PUT", "url": "https://api.corp.test/"}, {"url": url("api.corp.test", 443)}))
	d.action == "allow"
}

test_ask_http_post_other_host if {
	d := toolcall.decide(tool("http_request", {"method": "POST", "url": "https://evil.test/"}, {"url": url("evil.test", 443)}))
	d.action == "ask"
	d.codes == ["toolcall.external_write"]
}

test_ask_http_lower_case_method if {
	d := toolcall.decide(tool("http_request", {"method": "delete", "url": "https://evil.test/"}, {"url": url("evil.test", 443)}))
	d.codes == ["toolcall.external_write"]
}

test_allow_http_get_other_host if {
	d := toolcall.decide(tool("http_request", {"method": "GET", "url": "https://evil.test/"}, {"url": url("evil.test", 443)}))
	d.codes == ["toolcall.read"]
}

test_ask_http_unparsed_url if {
	d := toolcall.decide(tool("http_request", {"method": "GET", "url": "::"}, {"url": {"parsed": false}}))
	d.codes == ["toolcall.unparsed"]
}

test_ask_http_missing_url if {
	d := toolcall.decide(tool("http_request", {"method": "POST"}, {}))
	d.codes == ["toolcall.unparsed", "toolcall.external_write"]
}

test_ask_frozen_http_post_allowlisted if {
	d := toolcall.decide(frozen_tool("http_request", {"method": "POST", "url": "https://example.com/"}, {"url": url("example.com", 443)}))
	d.codes == ["toolcall.frozen"]
}

test_ask_send_email if {
	d := toolcall.decide(tool("send_email", {"to": "a@b.c"}, {}))
	d.action == "ask"
	d.codes == ["toolcall.external_write"]
}

test_ask_curl_post_other_host if {
	c := cmd(["curl", "-X", "POST", "https://evil.test/"], {"http": {"method": "POST", "urls": [url("evil.test", 443)]}})
	d := toolcall.decide(shell([c], {}))
	d.codes == ["toolcall.external_write"]
}

test_allow_curl_post_allowlisted if {
	c := cmd(["curl", "-d", "x", "https://example.com/"], {"http": {"method": "POST", "urls": [url("example.com", 443)]}})
	d := toolcall.decide(shell([c], {}))
	d.action == "allow"
}

test_ask_curl_post_without_url if {
	c := cmd(["curl", "-d", "x"], {"http": {"method": "POST", "urls": []}})
	d := toolcall.decide(shell([c], {}))
	d.codes == ["toolcall.external_write"]
}

test_allow_curl_get_other_host if {
	c := cmd(["curl", "https://evil.test/"], {"http": {"method": "GET", "urls": [url("evil.test", 443)]}})
	d := toolcall.decide(shell([c], {}))
	d.action == "allow"
}

# -- writes -----------------------------------------------------------------------------------------------

test_allow_write_file_inside if {
	d := toolcall.decide(tool("write_file", {"path": "a.txt", "content": "x"}, {"path": pinfo("a.txt", {})}))
	d.action == "allow"
	d.codes == ["toolcall.write"]
}

test_ask_write_file_outside if {
	d := toolcall.decide(tool("write_file", {"path": "/etc/passwd"}, {"path": outside("/etc/passwd")}))
	d.codes == ["toolcall.write_outside_workspace"]
}

test_ask_write_file_missing_path if {
	d := toolcall.decide(tool("write_file", {"content": "x"}, {}))
	d.codes == ["toolcall.unparsed", "toolcall.write_outside_workspace"]
}

test_ask_frozen_write_file if {
	d := toolcall.decide(frozen_tool("write_file", {"path": "a.txt"}, {"path": pinfo("a.txt", {})}))
	d.codes == ["toolcall.frozen"]
}

test_ask_redirect_outside if {
	c := cmd(["echo", "hi"], {"redirects": [{"op": ">", "target": "/etc/passwd"}], "writes": [outside("/etc/passwd")]})
	d := toolcall.decide(shell([c], {}))
	d.codes == ["toolcall.write_outside_workspace"]
}

test_allow_redirect_inside if {
	c := cmd(["echo", "hi"], {"redirects": [{"op": ">", "target": "out"}], "writes": [pinfo("out", {})]})
	d := toolcall.decide(shell([c], {}))
	d.codes == ["toolcall.write"]
}

test_ask_frozen_redirect_inside if {
	c := cmd(["echo", "hi"], {"redirects": [{"op": ">", "target": "out"}], "writes": [pinfo("out", {})]})
	d := toolcall.decide(shell([c], {"frozen": true}))
	d.codes == ["toolcall.frozen"]
}

# -- unknown, unparsed, dynamic, malformed ----------------------------------------------------------------

test_ask_unknown_tool if {
	d := toolcall.decide(tool("launch_missiles", {}, {}))
	d.action == "ask"
	d.codes == ["toolcall.unknown_tool"]
}

test_ask_unparsed_shell if {
	inp := object.union(shell([cmd(["echo", "$"], {})], {}), {"shell": {"parsed": false, "commands": [cmd(["echo", "$"], {})]}})
	d := toolcall.decide(inp)
	d.action == "ask"
	d.codes == ["toolcall.unparsed"]
}

test_deny_unparsed_shell_deleting_home if {
	rm := cmd(["rm", "-rf", "~"], {"paths": [{"raw": "~", "is_home": true}]})
	d := toolcall.decide(object.union(shell([], {}), {"shell": {"parsed": false, "commands": [rm]}}))
	d.action == "deny"
	d.codes == ["toolcall.delete_home"]
}

test_ask_shell_missing if {
	d := toolcall.decide(tool("shell", {"command": "ls"}, {}))
	d.codes == ["toolcall.unparsed"]
}

test_ask_dynamic_command if {
	d := toolcall.decide(shell([cmd(["$CMD", "x"], {"dynamic": true})], {}))
	d.codes == ["toolcall.dynamic"]
}

test_deny_missing_tool_name if {
	d := toolcall.decide({"kind": "toolcall", "session": sess({}), "tool": {"args": {}}})
	d.action == "deny"
	d.codes == ["toolcall.invalid_input"]
}

test_deny_empty_input if {
	d := toolcall.decide({})
	d.action == "deny"
	d.codes == ["toolcall.invalid_input"]
}

test_deny_beats_ask if {
	rm := cmd(["rm", "-rf", "/"], {"paths": [outside("/")]})
	k := cmd(["kubectl", "apply", "-f", "x"], {"op": "&&", "operands": ["apply"]})
	d := toolcall.decide(shell([k, rm], {}))
	d.action == "deny"
	d.codes == ["toolcall.delete_outside_workspace"]
}

test_ask_reasons_are_text if {
	d := toolcall.decide(shell([cmd(["rm", "-rf", "build"], {})], {}))
	d.reasons == ["deleting needs approval: rm -rf build"]
}
