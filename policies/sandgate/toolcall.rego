# Tool-call decisions: the harness asks before it runs each tool call.
#
# Rules add {"code", "reason"} items to `deny`, `ask` and `allow`; any deny wins, then any ask, then any
# allow, else deny (data.sandgate.lib.decision.combine). This file judges the call as a whole: known tool
# names, file tools, HTTP, SQL, messages, deploys, a frozen session, and sequences in the session's history.
# toolcall_shell.rego judges the commands of shell-like tools, toolcall_mcp.rego tools called through the
# MCP proxy (input.mcp): the rules here do not fire for those.
#
# Facts come from sandgate (gateway/toolcalls/): input.shell.commands[_], input.path, input.url, input.sql,
# input.history. Tunables and tables: data.sandgate.config.toolcall. A missing fact is unknown, and unknown
# never allows a delete or a write outside the workspace.
package sandgate.toolcall

import rego.v1

import data.sandgate.lib.decision as decision_lib
import data.sandgate.lib.hosts
import data.sandgate.lib.paths

# METADATA
# title: Tool-call decision
# description: The deny, ask and allow items combined (deny beats ask beats allow; nothing is deny).
# custom:
#   code: policy.default_deny
decision := decision_lib.combine(deny, ask, allow)

default cfg := {}

cfg := data.sandgate.config.toolcall

# conf reads a list (or object) from the configuration; conf_map an object.
conf(key) := object.get(cfg, key, [])

conf_map(key) := object.get(cfg, key, {})

tool_name := object.get(input, ["tool", "name"], "")

# The call's arguments, for site rules. The shipped rules read single arguments (`input.tool.args.method`), never
# the whole: the decision cache then keys on the facts built from them, not on their text (a statement's
# literals), unless a site rule reads them.
tool_args := object.get(input, ["tool", "args"], {})

# The session's history (input.history), for site rules. The shipped rules read its entries field by field
# (below) and never use it: the decision cache keys on the whole history only when a site rule does.
history := object.get(input, "history", [])


# native: the call did not come through the MCP proxy (toolcall_mcp.rego judges those).
native if not input.mcp

frozen if input.session.frozen == true

tool_in(key) if tool_name in conf(key)

valid_name if {
	is_string(tool_name)
	tool_name != ""
}

known_tool if {
	some key in ["shell_tools", "read_tools", "write_tools", "delete_tools", "deploy_tools", "message_tools", "other_tools"]
	tool_in(key)
}

# -- invalid, unknown, unconfigured ---------------------------------------------------------------------

deny contains {"code": "toolcall.invalid_input", "reason": "the tool call has no tool name"} if {
	native
	not valid_name
}

ask contains {"code": "toolcall.unknown_tool", "reason": sprintf("unknown tool %s needs approval", [tool_name])} if {
	native
	valid_name
	not known_tool
}

ask contains {"code": "toolcall.no_config", "reason": "the tool-call policy has no configuration"} if {
	count(object.keys(cfg)) == 0
}

# -- file tools -----------------------------------------------------------------------------------------

file_path := input.path if is_object(input.path)

ask contains {"code": "toolcall.unparsed", "reason": sprintf("%s needs a path argument", [tool_name])} if {
	native
	tool_in("path_tools")
	not file_path
}

ask contains {"code": "toolcall.delete", "reason": sprintf("%s needs approval", [tool_name])} if {
	native
	tool_in("delete_tools")
}

deny contains {"code": code, "reason": sprintf("delete target %s%s", [paths.shown(file_path), paths.problem_text[code]])} if {
	native
	tool_in("delete_tools")
	code := paths.delete_problem(file_path)
}

ask contains {"code": "toolcall.write_outside_workspace", "reason": msg} if {
	native
	tool_in("write_tools")
	not paths.inside(object.get(input, "path", {}))
	msg := sprintf("writing %s outside the workspace needs approval", [paths.shown(object.get(input, "path", {}))])
}

deny contains {"code": "toolcall.device", "reason": sprintf("writing %s%s", [paths.shown(file_path), paths.problem_text["toolcall.device"]])} if {
	native
	tool_in("write_tools")
	file_path.device == true
}

# -- deploys and messages -------------------------------------------------------------------------------

ask contains {"code": "toolcall.deploy", "reason": sprintf("%s needs approval", [tool_name])} if {
	native
	tool_in("deploy_tools")
}

ask contains {"code": "toolcall.external_write", "reason": sprintf("%s sends a message and needs approval", [tool_name])} if {
	native
	tool_in("message_tools")
}

# -- HTTP requests --------------------------------------------------------------------------------------

http_method := upper(m) if {
	m := object.get(input, ["tool", "args", "method"], "GET")
	is_string(m)
} else := "?"

url_allowed(u) if {
	object.get(u, "parsed", false) == true
	hosts.allowlisted(object.get(input, ["session", "allow"], []), object.get(u, "host", ""), object.get(u, "port", 0))
}

ask contains {"code": "toolcall.external_write", "reason": sprintf("%s to a host outside the allow list needs approval", [http_method])} if {
	native
	tool_name == "http_request"
	not http_method in conf("read_methods")
	not url_allowed(object.get(input, "url", {}))
}

# http_request runs on the harness side, outside the sandbox's egress proxy and its address check: a request to
# loopback (sandgate's own API), the metadata address or a private network asks.
ask contains {"code": "toolcall.internal_address", "reason": sprintf("an HTTP request to %s (%s) needs approval", [input.url.host, input.url.ip_class])} if {
	native
	tool_name == "http_request"
	not input.url.ip_class in {"", "public"}
}

ask contains {"code": "toolcall.delete", "reason": "an HTTP DELETE needs approval"} if {
	native
	tool_name == "http_request"
	http_method == "DELETE"
}

ask contains {"code": "toolcall.unparsed", "reason": "the URL could not be parsed"} if {
	native
	tool_name == "http_request"
	is_object(input.url)
	object.get(input.url, "parsed", false) != true
}

# The facts sandgate builds from a call's arguments (the server always adds them, parsed or not). An input
# written by hand may lack them: that asks too, but says so instead of blaming the parser.
missing_facts contains "shell" if {
	native
	tool_in("shell_tools")
	not is_object(object.get(input, "shell", null))
}

missing_facts contains "url" if {
	native
	tool_name == "http_request"
	not is_object(object.get(input, "url", null))
}

missing_facts contains "sql" if {
	native
	tool_name == "sql"
	not is_object(object.get(input, "sql", null))
}

ask contains {"code": "toolcall.no_facts", "reason": sprintf("the input has no %s facts (input.%s): sandgate builds them from the call's arguments, and so does `sandgate policy eval --tool`", [f, f])} if {
	some f in missing_facts
}

# -- SQL (the sql tool, and SQL clients in shell commands) -----------------------------------------------

sql_facts contains s if {
	native
	tool_name == "sql"
	s := input.sql
	is_object(s)
}

sql_facts contains c.sql if {
	some c in commands
	is_object(c.sql)
}

sql_kind_known(k) if k in conf("sql_read_kinds")

sql_kind_known(k) if k in conf("sql_write_kinds")

sql_kind_known(k) if k in conf("sql_delete_kinds")

ask contains {"code": "toolcall.unparsed", "reason": "the SQL could not be parsed"} if {
	some s in sql_facts
	object.get(s, "parsed", false) != true
}

ask contains {"code": "toolcall.sql_invisible", "reason": "the SQL it runs is not visible (a file, stdin or an interactive session)"} if {
	some s in sql_facts
	object.get(s, "visible", true) != true
}

ask contains {"code": "toolcall.delete", "reason": sprintf("SQL %s deletes data", [k])} if {
	some s in sql_facts
	some k in object.get(s, "kinds", [])
	k in conf("sql_delete_kinds")
}

ask contains {"code": "toolcall.sql_unbounded", "reason": sprintf("SQL %s without WHERE changes every row", [k])} if {
	some s in sql_facts
	some k in object.get(s, "unbounded", [])
}

ask contains {"code": "toolcall.sql_unknown", "reason": sprintf("SQL statement %s is not known to the policy", [k])} if {
	some s in sql_facts
	some k in object.get(s, "kinds", [])
	not sql_kind_known(k)
}

# What the SQL does (v3; gateway/toolcalls/sql.py): `kind` is read | session | write | delete | other, the least
# safe statement's class. Only a read, transaction or session control, or a bounded write (INSERT; UPDATE with a
# WHERE that is not trivially true) may run without approval; every function called must be one
# `sql_safe_functions` lists, every setting a SET changes one `sql_safe_settings` lists (both objects: a site adds
# keys in its copy of sandgate/config/toolcall/data.json, merged with the shipped tables).
ask contains {"code": "toolcall.sql_unknown", "reason": sprintf("SQL %s is not known to be safe", [sql_unsafe_text(s)])} if {
	some s in sql_facts
	object.get(s, "parsed", false) == true
	object.get(s, "kind", "") == "other"
}

ask contains {"code": "toolcall.delete", "reason": sprintf("SQL %s deletes data", [sql_unsafe_text(s)])} if {
	some s in sql_facts
	object.get(s, "kind", "") == "delete"
}

ask contains {"code": "toolcall.sql_function", "reason": sprintf("SQL calls %s(), which sql_safe_functions does not list", [f])} if {
	some s in sql_facts
	some f in object.get(s, "functions", [])
	not sql_safe_function(f)
}

ask contains {"code": "toolcall.sql_setting", "reason": sprintf("SQL sets %s, which sql_safe_settings does not list", [k])} if {
	some s in sql_facts
	some k in object.get(s, "settings", [])
	not sql_safe_setting(k)
}

sql_unsafe_text(s) := concat(", ", s.unsafe) if count(object.get(s, "unsafe", [])) > 0

else := concat(", ", object.get(s, "kinds", ["statement"]))

sql_safe_function(f) if conf_map("sql_safe_functions")[f] == true

sql_safe_setting(k) if conf_map("sql_safe_settings")[k] == true

sql_read(s) if {
	object.get(s, "parsed", false) == true
	object.get(s, "visible", true) == true
	object.get(s, "kind", "read") in {"read", "session"}
	every k in object.get(s, "kinds", []) {
		k in conf("sql_read_kinds")
	}
	every f in object.get(s, "functions", []) {
		sql_safe_function(f)
	}
	every k in object.get(s, "settings", []) {
		sql_safe_setting(k)
	}
}

# -- frozen sessions: reads only ------------------------------------------------------------------------

mutating if {
	some key in ["write_tools", "delete_tools", "deploy_tools", "message_tools"]
	tool_in(key)
}

mutating if {
	tool_name == "http_request"
	not http_method in conf("read_methods")
}

mutating if {
	tool_name == "sql"
	not sql_read(object.get(input, "sql", {}))
}

mutating if {
	some i, _ in commands
	not i in reads
}

ask contains {"code": "toolcall.frozen", "reason": sprintf("the session is frozen: %s needs approval", [mutation_text])} if {
	native
	frozen
	mutating
}

mutation_text := concat("; ", [shown(c) | some i, c in commands; not i in reads]) if {
	tool_in("shell_tools")
} else := tool_name

# A budget of the session is spent ([budgets.WORKLOAD], or its own set by PATCH /v1/sessions/{id}): every call
# asks, reads too. sandgate lists the spent budgets in input.session.budgets_spent.
ask contains item if {
	count(budgets_spent) > 0
	item := {"code": "budget.exceeded", "reason": sprintf("the session spent its %s budget: every tool call needs approval", [concat(", ", budgets_spent)])}
}

budgets_spent := [sprintf("%v", [b]) | some b in input.session.budgets_spent] if {
	is_array(input.session.budgets_spent)
} else := []

# -- sequences in the session's history (input.history: oldest first) -----------------------------------

# History entries are read field by field (`input.history[i].frozen`), never whole: the decision cache then
# keys only on those fields, not on each entry's id, step and age (gateway/policy/readset.py).
default history_size := 0

history_size := count(input.history)

# A destructive call right after a freeze was lifted asks: the last `after_freeze_calls` calls were made in a
# frozen session and this one is not.
ask contains {"code": "toolcall.after_freeze", "reason": "the session was frozen until just now: this destructive call needs approval"} if {
	n := object.get(cfg, "after_freeze_calls", 1)
	n > 0
	some i
	input.history[i].frozen == true # the history first: it rarely holds, and `destructive` costs more
	i >= history_size - n
	native
	not frozen
	destructive
}

# After `denial_streak` denials in a row, every mutating call asks: something is probing the policy.
ask contains {"code": "toolcall.after_denials", "reason": sprintf("the last %d tool calls were denied: this one needs approval", [n])} if {
	n := object.get(cfg, "denial_streak", 3)
	n > 0
	history_size >= n
	every i in numbers.range(history_size - n, history_size - 1) {
		input.history[i].decision == "deny"
	}
	native
	mutating
}

destructive if {
	some key in ["delete_tools", "deploy_tools"]
	tool_in(key)
}

destructive if count(deleting) + count(deploying) + count(git_destroying) + count(cli_destroying) > 0

# -- what is allowed ------------------------------------------------------------------------------------

allow contains {"code": "toolcall.read", "reason": "the tool call only reads"} if {
	native
	known_tool
	not mutating
}

allow contains {"code": "toolcall.write", "reason": "the tool call changes state, and no rule asks for it"} if {
	native
	known_tool
	mutating
}
