# Tool-call decisions: the harness asks before it runs each tool call.
#
# Deny beats ask beats allow. Deletes, deploys, external writes, writes outside the workspace, unknown tools,
# commands computed at run time and anything unparsed ask; a delete of /, the home directory, a parent of the
# workspace or anything else outside the workspace is denied. A frozen session asks for every mutating action
# but still allows reads. Any command no sensitive rule matches is allowed (non-frozen).
#
# The facts come from sandgate (gateway/toolcalls/enrich.py): input.shell.commands[_] carries name,
# operands, flags, paths, writes, cwd, sql, http and dynamic; input.path, input.url and input.sql describe
# tool arguments. Missing facts count as unknown, and unknown never allows a delete or a write outside.
#
# Written as functions of the input document (`decide(inp)`): the embedded engine (regopy) crashes on
# `with input as` for rules that depend on other rules. regopy quirks kept in mind here: sprintf("%s") quotes
# strings produced by builtins (so messages use concat), `x in y` is only used in rule bodies, set iteration
# order is not sorted (lists are de-duplicated in order with uniq).
package sandgate.toolcall

import rego.v1

import data.sandgate.lib.hosts

default cfg := {}

cfg := data.sandgate.config.toolcall

decision := decide(input)

# -- accessors (missing fields become empty values) -------------------------------------------------------

conf(key) := object.get(cfg, key, [])

conf_map(key) := object.get(cfg, key, {})

tool_name(inp) := object.get(object.get(inp, "tool", {}), "name", "")

tool_args(inp) := object.get(object.get(inp, "tool", {}), "args", {})

sess(inp) := object.get(inp, "session", {})

frozen(inp) if object.get(sess(inp), "frozen", false) == true

tool_in(inp, key) if tool_name(inp) in conf(key)

is_shell(inp) if tool_in(inp, "shell_tools")

cmds(inp) := object.get(object.get(inp, "shell", {}), "commands", []) if is_shell(inp) else := []

cname(c) := object.get(c, "name", "")

operands(c) := object.get(c, "operands", [])

flags(c) := object.get(c, "flags", [])

sub(c) := operands(c)[0]

argv_text(c) := concat(" ", object.get(c, "argv", []))

in_ws(p) if object.get(p, "in_workspace", false) == true

known(p) if object.get(p, "dynamic", true) == false

known_tool(inp) if {
	some key in ["shell_tools", "read_tools", "write_tools", "delete_tools", "deploy_tools", "message_tools", "other_tools"]
	tool_in(inp, key)
}

flatten(lists) := [x | some xs in lists; some x in xs]

uniq(xs) := [x | some i; x := xs[i]; not x in array.slice(xs, 0, i)]

item(code, reason) := {"code": code, "reason": reason}

# -- deletes ----------------------------------------------------------------------------------------------

file_delete(c) if cname(c) in conf("delete_commands")

file_delete(c) if {
	some prefix in conf("delete_command_prefixes")
	startswith(cname(c), prefix)
}

file_delete(c) if {
	cname(c) == "find"
	"-delete" in flags(c)
}

file_delete(c) if {
	cname(c) == "find"
	some name in object.get(c, "exec_names", [])
	name in conf("delete_commands")
}

file_delete(c) if {
	cname(c) == "git"
	sub(c) in conf("git_delete_subcommands")
}

file_delete(c) if {
	cname(c) == "git"
	sub(c) == "reset"
	"--hard" in flags(c)
}

# delete_targets: what a delete may remove (git works on its working directory, too).
delete_targets(c) := array.concat(object.get(c, "paths", []), [object.get(c, "cwd", {})]) if {
	cname(c) == "git"
} else := object.get(c, "paths", [])

all_delete_targets(inp) := array.concat(
	[p | some c in cmds(inp); file_delete(c); some p in delete_targets(c)],
	[object.get(inp, "path", {}) | tool_in(inp, "delete_tools")],
)

target_problem(p) := "toolcall.delete_root" if {
	object.get(p, "is_root", false) == true
} else := "toolcall.delete_home" if {
	object.get(p, "is_home", false) == true
} else := "toolcall.delete_workspace_parent" if {
	object.get(p, "is_workspace_parent", false) == true
} else := "toolcall.delete_outside_workspace" if {
	known(p)
	not in_ws(p)
}

problem_text := {
	"toolcall.delete_root": " is the root directory",
	"toolcall.delete_home": " is the home directory",
	"toolcall.delete_workspace_parent": " is a parent of the workspace",
	"toolcall.delete_outside_workspace": " is outside the workspace",
}

delete_denies(inp) := [item(code, concat("", ["delete target ", object.get(p, "raw", "?"), problem_text[code]])) |
	some p in all_delete_targets(inp)
	code := target_problem(p)
]

delete_asks(inp) := array.concat(
	[item("toolcall.delete", concat("", ["deleting needs approval: ", argv_text(c)])) | some c in cmds(inp); file_delete(c)],
	[item("toolcall.delete", concat("", [tool_name(inp), " needs approval"])) | tool_in(inp, "delete_tools")],
)

# -- SQL (the sql tool, and psql -c / mysql -e / sqlite3 in shell commands) ---------------------------------

sql_infos(inp) := array.concat(
	[object.get(inp, "sql", {}) | tool_name(inp) == "sql"],
	[c.sql | some c in cmds(inp); is_object(object.get(c, "sql", null))],
)

sql_known_kind(k) if k in conf("sql_read_kinds")

sql_known_kind(k) if k in conf("sql_write_kinds")

sql_known_kind(k) if k in conf("sql_delete_kinds")

sql_asks(inp) := flatten([
	[item("toolcall.unparsed", "the SQL could not be parsed") | some s in sql_infos(inp); object.get(s, "parsed", false) != true],
	[item("toolcall.delete", concat("", ["SQL ", k, " deletes data"])) |
		some s in sql_infos(inp)
		some k in object.get(s, "kinds", [])
		k in conf("sql_delete_kinds")
	],
	[item("toolcall.sql_unknown", concat("", ["SQL statement ", k, " is not known to the policy"])) |
		some s in sql_infos(inp)
		some k in object.get(s, "kinds", [])
		not sql_known_kind(k)
	],
])

sql_read(s) if {
	object.get(s, "parsed", false) == true
	count([k | some k in object.get(s, "kinds", []); not k in conf("sql_read_kinds")]) == 0
}

# -- deploys ----------------------------------------------------------------------------------------------

deploy_cmd(c) if sub(c) in object.get(conf_map("deploy_subcommands"), cname(c), [])

deploy_cmd(c) if cname(c) in conf("deploy_commands")

deploy_cmd(c) if {
	cname(c) in conf("deploy_operand_commands")
	"deploy" in operands(c)
}

deploy_cmd(c) if {
	cname(c) in conf("deploy_bare_commands")
	count(operands(c)) == 0
}

deploy_cmd(c) if {
	some flag in object.get(conf_map("deploy_flags"), cname(c), [])
	flag in flags(c)
}

deploy_cmd(c) if risky_push(c)

git_push(c) if {
	cname(c) == "git"
	sub(c) == "push"
}

# risky_push: forced, deleting, mirroring, to a protected branch, or without an explicit refspec (the
# current branch may be main). `git push origin feature` is allowed here (egress still asks for pushes).
risky_push(c) if {
	git_push(c)
	some flag in conf("git_push_risky_flags")
	flag in flags(c)
}

risky_push(c) if {
	git_push(c)
	count(operands(c)) < 3
}

risky_push(c) if {
	git_push(c)
	some refspec in array.slice(operands(c), 2, count(operands(c)))
	risky_refspec(refspec)
}

risky_refspec(r) if startswith(r, "+")

risky_refspec(r) if startswith(r, ":")

risky_refspec(r) if refspec_dest(r) in conf("protected_branches")

risky_refspec(r) if refspec_dest(r) in ["HEAD", "@"]

refspec_dest(r) := trim_prefix(dest, "refs/heads/") if {
	parts := split(r, ":")
	dest := parts[count(parts) - 1]
}

deploy_asks(inp) := array.concat(
	[item("toolcall.deploy", concat("", ["deploying needs approval: ", argv_text(c)])) | some c in cmds(inp); deploy_cmd(c)],
	[item("toolcall.deploy", concat("", [tool_name(inp), " needs approval"])) | tool_in(inp, "deploy_tools")],
)

# -- external writes --------------------------------------------------------------------------------------

http_method(inp) := upper(m) if {
	m := object.get(tool_args(inp), "method", "GET")
	is_string(m)
} else := "?"

url_allowed(u, inp) if {
	object.get(u, "parsed", false) == true
	hosts.allowlisted(object.get(sess(inp), "allow", []), object.get(u, "host", ""), object.get(u, "port", 0))
}

shell_http_write(c, inp) if {
	h := object.get(c, "http", null)
	is_object(h)
	not object.get(h, "method", "GET") in conf("read_methods")
	urls := object.get(h, "urls", [])
	count([u | some u in urls; url_allowed(u, inp)]) < max([count(urls), 1])
}

external_asks(inp) := flatten([
	[item("toolcall.external_write", concat("", [http_method(inp), " to a host outside the allow list needs approval"])) |
		tool_name(inp) == "http_request"
		not http_method(inp) in conf("read_methods")
		not url_allowed(object.get(inp, "url", {}), inp)
	],
	[item("toolcall.external_write", concat("", [tool_name(inp), " sends a message and needs approval"])) | tool_in(inp, "message_tools")],
	[item("toolcall.external_write", concat("", ["sending data to a host outside the allow list: ", argv_text(c)])) |
		some c in cmds(inp)
		shell_http_write(c, inp)
	],
])

# -- writes outside the workspace -------------------------------------------------------------------------

outside_write_asks(inp) := array.concat(
	[item("toolcall.write_outside_workspace", concat("", ["writing ", object.get(p, "raw", "?"), " outside the workspace needs approval"])) |
		tool_in(inp, "write_tools")
		p := object.get(inp, "path", {})
		not in_ws(p)
	],
	[item("toolcall.write_outside_workspace", concat("", ["writing ", object.get(p, "raw", "?"), " outside the workspace needs approval"])) |
		some c in cmds(inp)
		some p in object.get(c, "writes", [])
		not in_ws(p)
	],
)

# -- unknown, unparsed and run-time computed --------------------------------------------------------------

unparsed_asks(inp) := flatten([
	[item("toolcall.unparsed", "the shell command could not be parsed") |
		is_shell(inp)
		object.get(object.get(inp, "shell", {}), "parsed", false) != true
	],
	[item("toolcall.unparsed", "the URL could not be parsed") |
		tool_name(inp) == "http_request"
		object.get(object.get(inp, "url", {}), "parsed", false) != true
	],
	[item("toolcall.unparsed", concat("", [tool_name(inp), " needs a path argument"])) |
		tool_in(inp, "path_tools")
		not is_object(object.get(inp, "path", null))
	],
])

dynamic_asks(inp) := [item("toolcall.dynamic", concat("", ["the command to run is only known at run time: ", argv_text(c)])) |
	some c in cmds(inp)
	object.get(c, "dynamic", false) == true
]

unknown_asks(inp) := [item("toolcall.unknown_tool", concat("", ["unknown tool ", tool_name(inp), " needs approval"]))] if {
	not known_tool(inp)
} else := []

config_asks(inp) := [item("toolcall.no_config", "the tool-call policy has no configuration")] if {
	count(object.keys(cfg)) == 0
} else := []

# -- frozen sessions: reads only --------------------------------------------------------------------------

read_cmd(c) if {
	plain_read(c)
	not file_delete(c)
	count(object.get(c, "writes", [])) == 0
	object.get(c, "dynamic", false) == false
}

plain_read(c) if cname(c) in conf("read_commands")

plain_read(c) if sub(c) in object.get(conf_map("read_subcommands"), cname(c), [])

plain_read(c) if sql_read(object.get(c, "sql", {}))

mutating(inp) if {
	some key in ["write_tools", "delete_tools", "deploy_tools", "message_tools"]
	tool_in(inp, key)
}

mutating(inp) if {
	tool_name(inp) == "http_request"
	not http_method(inp) in conf("read_methods")
}

mutating(inp) if {
	tool_name(inp) == "sql"
	not sql_read(object.get(inp, "sql", {}))
}

mutating(inp) if {
	some c in cmds(inp)
	not read_cmd(c)
}

frozen_asks(inp) := [item("toolcall.frozen", concat("", ["the session is frozen: ", mutation_text(inp), " needs approval"]))] if {
	frozen(inp)
	mutating(inp)
} else := []

mutation_text(inp) := concat("; ", [argv_text(c) | some c in cmds(inp); not read_cmd(c)]) if {
	is_shell(inp)
} else := tool_name(inp)

# -- the decision -----------------------------------------------------------------------------------------

denies(inp) := flatten([
	[item("toolcall.invalid_input", "the tool call has no tool name") | not valid_name(tool_name(inp))],
	delete_denies(inp),
])

valid_name(name) if {
	is_string(name)
	name != ""
}

asks(inp) := flatten([
	config_asks(inp), unknown_asks(inp), unparsed_asks(inp), dynamic_asks(inp), delete_asks(inp),
	sql_asks(inp), deploy_asks(inp), external_asks(inp), outside_write_asks(inp), frozen_asks(inp),
])

decide(inp) := verdict(denies(inp), asks(inp), inp)

# verdict: deny beats ask beats allow; allow needs a known tool (a positive grant). Items are computed once.
verdict(deny_items, ask_items, inp) := {"action": "deny", "reasons": reasons(deny_items), "codes": codes(deny_items)} if {
	count(deny_items) > 0
} else := {"action": "ask", "reasons": reasons(ask_items), "codes": codes(ask_items)} if {
	count(ask_items) > 0
} else := {"action": "allow", "reasons": ["the tool call changes state, and no rule asks for it"], "codes": ["toolcall.write"]} if {
	known_tool(inp)
	mutating(inp)
} else := {"action": "allow", "reasons": ["the tool call only reads"], "codes": ["toolcall.read"]} if {
	known_tool(inp)
} else := {"action": "deny", "reasons": ["no rule allows this tool call"], "codes": ["toolcall.default_deny"]}

reasons(items) := uniq([i.reason | some i in items])

codes(items) := uniq([i.code | some i in items])
