# Tool calls, part 2: the commands of shell-like tools (input.shell.commands, from gateway/toolcalls/describe.py).
#
# Every command a line really runs is in the list, nested ones (bash -c, wrappers, interpreters' code,
# scripts written and then run, aliases, programs run through git config or PAGER, SQL meta-commands) marked
# with `origin`. Per command: name, operands, flags, options, paths, writes, deletes, moves, cwd, dynamic,
# and where they apply code, runs, executes, remote, http, sql, links, stdin_operands. Rules here judge
# each command; the per-command sets (`deleting`, `reads`, ...) hold indexes into `commands`.
package sandgate.toolcall

import rego.v1

import data.sandgate.lib.paths

commands := cs if {
	native
	shell_facts
	cs := object.get(input, ["shell", "commands"], [])
	is_array(cs)
} else := []

# Shell-like tools, and SQL that runs a program on the database host (COPY ... PROGRAM: `input.shell.from`).
shell_facts if tool_in("shell_tools")

shell_facts if input.shell.from == "sql"

sub(c) := object.get(c, "operands", [])[0]

shown(c) := sprintf("%s (run by %s)", [concat(" ", object.get(c, "argv", [])), c.origin]) if {
	object.get(c, "origin", "") != ""
} else := concat(" ", object.get(c, "argv", []))

ask contains {"code": "toolcall.unparsed", "reason": "the shell command could not be parsed"} if {
	native
	tool_in("shell_tools")
	is_object(input.shell)
	object.get(input.shell, "parsed", false) != true
}

ask contains {"code": "toolcall.unparsed", "reason": "the program the SQL runs (COPY ... PROGRAM) is not visible"} if {
	native
	input.shell.from == "sql"
	input.shell.parsed != true
}

# -- deletes, moves, devices ----------------------------------------------------------------------------

file_delete(c) if c.name in conf("delete_commands")

file_delete(c) if {
	some prefix in conf("delete_command_prefixes")
	startswith(c.name, prefix)
}

file_delete(c) if {
	c.name == "find"
	"-delete" in c.flags
}

file_delete(c) if {
	c.name == "git"
	sub(c) in conf("git_delete_subcommands")
}

deleting contains i if {
	some i, c in commands
	file_delete(c)
}

deleting contains i if {
	some i, c in commands
	count(object.get(c, "deletes", [])) > 0
}

# A program that drops what it replaces when given a flag (`pg_restore --clean`, `-c`: DROP before each CREATE) deletes
# as dropdb does; its operands are not files it deletes.
deleting contains i if {
	some i, c in commands
	some flag in object.get(conf_map("delete_command_flags"), c.name, [])
	flag in c.flags
}

# delete_targets: what a delete may remove; git works on its working directory too.
delete_targets(c) := array.concat(object.get(c, "deletes", []), object.get(c, "paths", [])) if {
	file_delete(c)
	c.name != "git"
} else := array.concat(object.get(c, "deletes", []), array.concat(object.get(c, "paths", []), [object.get(c, "cwd", {})])) if {
	file_delete(c)
} else := object.get(c, "deletes", [])

ask contains {"code": "toolcall.delete", "reason": sprintf("deleting needs approval: %s", [shown(commands[i])])} if {
	some i in deleting
}

deny contains {"code": code, "reason": sprintf("delete target %s%s", [paths.shown(p), paths.problem_text[code]])} if {
	some i in deleting
	some p in delete_targets(commands[i])
	code := delete_problem_of(commands[i], p)
}

# elsewhere: the command runs on another host or in a container (carried by ssh, docker exec, ...): there is no
# workspace there, so only a wipe (root, home, device) is denied; any other delete asks.
elsewhere(c) if c.remote

elsewhere(c) if c.container

delete_problem_of(c, p) := code if {
	elsewhere(c)
	code := paths.wipe_problem(p)
}

delete_problem_of(c, p) := code if {
	not elsewhere(c)
	code := paths.delete_problem(p)
}

# Moving a path away removes it from where it was: moving the root, a home or a parent of the workspace is a
# wipe; moving anything else from outside the workspace is a write there.
deny contains {"code": code, "reason": sprintf("moving %s away: it%s", [paths.shown(p), paths.problem_text[code]])} if {
	some c in commands
	some p in object.get(c, "moves", [])
	code := paths.wipe_problem(p)
}

ask contains {"code": "toolcall.write_outside_workspace", "reason": sprintf("moving %s from outside the workspace needs approval", [paths.shown(p)])} if {
	some c in commands
	some p in object.get(c, "moves", [])
	not paths.wipe_problem(p)
	not paths.inside(p)
}

# Moving the whole workspace away (`mv . /tmp/x`, `gzip -r .`, `xz *`: a compressor replaces what it consumes)
# asks like a delete.
ask contains {"code": "toolcall.delete", "reason": sprintf("%s replaces the whole workspace: %s", [paths.shown(p), shown(c)])} if {
	some c in commands
	some p in object.get(c, "moves", [])
	whole_workspace(c, p)
}

whole_workspace(_, p) if {
	ws := trim_right(object.get(input, ["session", "workspace"], ""), "/")
	ws != ""
	trim_suffix(object.get(p, "normalized", ""), "/*") == ws
}

# elsewhere, the directory it starts in stands for the workspace
whole_workspace(c, p) if {
	elsewhere(c)
	trim_suffix(object.get(p, "normalized", ""), "/*") == object.get(c, ["cwd", "normalized"], "")
}

filesystem_cmd(c) if c.name in conf("filesystem_commands")

filesystem_cmd(c) if {
	some prefix in conf("filesystem_command_prefixes")
	startswith(c.name, prefix)
}

ask contains {"code": "toolcall.filesystem", "reason": sprintf("a disk or filesystem tool needs approval: %s", [shown(c)])} if {
	some c in commands
	filesystem_cmd(c)
}

deny contains {"code": "toolcall.device", "reason": sprintf("writing %s%s", [paths.shown(p), paths.problem_text["toolcall.device"]])} if {
	some c in commands
	some p in array.concat(object.get(c, "writes", []), device_operands(c))
	object.get(p, "device", false) == true
}

device_operands(c) := object.get(c, "paths", []) if filesystem_cmd(c) else := []

# -- writes outside the workspace, system changes --------------------------------------------------------

ask contains {"code": "toolcall.write_outside_workspace", "reason": sprintf("writing %s outside the workspace needs approval", [paths.shown(p)])} if {
	some c in commands
	some p in object.get(c, "writes", [])
	not paths.inside(p)
	object.get(p, "device", false) != true
}

system_cmd(c) if {
	c.name in conf("system_commands")
	not sub(c) in object.get(conf_map("system_read_subcommands"), c.name, [])
}

ask contains {"code": "toolcall.system", "reason": sprintf("changing the system needs approval: %s", [shown(c)])} if {
	some c in commands
	system_cmd(c)
}

# -- code computed or fetched at run time ----------------------------------------------------------------

ask contains {"code": "toolcall.dynamic", "reason": sprintf("what runs is only known at run time: %s", [shown(c)])} if {
	some c in commands
	object.get(c, "dynamic", true) != false
}

ask contains {"code": "toolcall.opaque_code", "reason": sprintf("the code builds code at run time (eval, decoding): %s", [shown(c)])} if {
	some c in commands
	object.get(c, ["code", "opaque"], false) == true
}

ask contains {"code": "toolcall.unparsed", "reason": sprintf("the %s code could not be parsed: %s", [c.code.language, shown(c)])} if {
	some c in commands
	object.get(c, ["code", "parsed"], true) != true
}

ask contains {"code": "toolcall.runs_written", "reason": sprintf("runs %s, written earlier from content not seen: %s", [paths.shown(c.runs.path), shown(c)])} if {
	some c in commands
	object.get(c, ["runs", "written"], false) == true
	object.get(c, ["runs", "known"], false) != true
}

# A tool that runs files without naming them (pytest and conftest.py, pip install . and setup.py, cargo and
# build.rs, direnv and .envrc, git and .git/config, ...) runs one the session wrote earlier from content not seen.
ask contains {"code": "toolcall.implicit_run", "reason": sprintf("runs %s (%s), written earlier from content not seen: %s", [paths.shown(r.path), r.via, shown(c)])} if {
	some c in commands
	some r in object.get(c, "implicit_runs", [])
	object.get(r, "known", false) != true
}

ask contains {"code": "toolcall.external_write", "reason": sprintf("runs on or copies to the remote host %s: %s", [object.get(c, ["remote", "host"], "?"), shown(c)])} if {
	some c in commands
	c.remote
}

ask contains {"code": "toolcall.external_write", "reason": sprintf("opens a raw network connection: %s", [shown(c)])} if {
	some c in commands
	c.name in conf("network_commands")
}

# -- deploys, destructive git ----------------------------------------------------------------------------

deploy_cmd(c) if sub(c) in object.get(conf_map("deploy_subcommands"), c.name, [])

deploy_cmd(c) if c.name in conf("deploy_commands")

deploy_cmd(c) if {
	c.name in conf("deploy_operand_commands")
	"deploy" in c.operands
}

deploy_cmd(c) if {
	c.name in conf("deploy_bare_commands")
	count(c.operands) == 0
}

deploy_cmd(c) if {
	some flag in object.get(conf_map("deploy_flags"), c.name, [])
	flag in c.flags
}

deploy_cmd(c) if risky_push(c)

deploying contains i if {
	some i, c in commands
	deploy_cmd(c)
}

ask contains {"code": "toolcall.deploy", "reason": sprintf("deploying needs approval: %s", [shown(commands[i])])} if {
	some i in deploying
}

git_push(c) if {
	c.name == "git"
	sub(c) == "push"
}

# A push without a refspec (the current branch may be main), to a protected branch, or of every branch.
risky_push(c) if {
	git_push(c)
	count(c.operands) < 3
}

risky_push(c) if {
	git_push(c)
	some refspec in array.slice(c.operands, 2, count(c.operands))
	dest := trim_prefix(trim_prefix(regex.replace(refspec, "^.*:", ""), "+"), "refs/heads/")
	dest in array.concat(conf("protected_branches"), ["HEAD", "@"])
}

risky_push(c) if {
	git_push(c)
	some flag in conf("git_push_risky_flags")
	flag in c.flags
}

git_rule(c) := rule if {
	c.name == "git"
	rule := conf_map("git_destructive")[sub(c)]
}

git_destructive(c) if git_rule(c).always == true

git_destructive(c) if {
	some flag in object.get(git_rule(c), "flags", [])
	flag in c.flags
}

git_destructive(c) if {
	some operand in object.get(git_rule(c), "operands", [])
	operand in array.slice(c.operands, 1, count(c.operands))
}

git_destructive(c) if {
	some prefix in object.get(git_rule(c), "operand_prefixes", [])
	some operand in array.slice(c.operands, 1, count(c.operands))
	startswith(operand, prefix)
}

git_destructive(c) if {
	object.get(git_rule(c), "separator", false) == true
	"--" in object.get(c, "effective", [])
}

git_destroying contains i if {
	some i, c in commands
	git_destructive(c)
	not git_spared(c)
}

# git_spared: `unless` flags make the command harmless (`git restore --staged`), unless `unless_not` flags
# come with them (`--worktree`).
git_spared(c) if {
	some flag in object.get(git_rule(c), "unless", [])
	flag in c.flags
	every other in object.get(git_rule(c), "unless_not", []) {
		not other in c.flags
	}
}

ask contains {"code": "toolcall.git_destructive", "reason": sprintf("this git command discards work or rewrites history: %s", [shown(commands[i])])} if {
	some i in git_destroying
}

# -- cloud, cluster and forge CLIs (data.sandgate.config.toolcall.cli) -----------------------------------

cli_spec(c) := conf_map("cli")[c.name]

cli_rank := {"read": 1, "local": 2, "write": 3, "destructive": 4}

# cli_hits[i]: for command i of a known CLI, position * 10 + rank of every leading word (where these CLIs
# name their verb: `aws s3 rm`, `gcloud compute instances delete`, `heroku apps:destroy`) that names a verb.
cli_hits[i] := hits if {
	some i, c in commands
	spec := cli_spec(c)
	words := array.slice(object.get(c, "operands", []), 0, object.get(spec, "depth", object.get(cfg, "cli_default_depth", 3)))
	hits := {hit |
		some position, word in words
		some class, rank in cli_rank
		some pattern in object.get(spec, class, [])
		verb_matches(pattern, word)
		hit := (position * 10) + rank
	}
}

verb_matches(pattern, word) if pattern == word

verb_matches(pattern, word) if {
	contains(pattern, "*")
	glob.match(pattern, [], word)
}

# cli_class[i]: the class of the last verb word (on one word the most dangerous class it matches); a copy
# whose destination is local (`aws s3 cp s3://b/k .`) is a download: local.
cli_class[i] := class if {
	some i, hits in cli_hits
	top := max(hits)
	not cli_download(i)
	some class, rank in cli_rank
	rank == top % 10
}

# (two rules rather than `else`: OPA refuses `else` on a rule with a variable in its head)
cli_class[i] := "local" if {
	some i, _ in cli_hits
	cli_download(i)
}

cli_download(i) if {
	c := commands[i]
	spec := cli_spec(c)
	some verb in object.get(spec, "downloads", [])
	verb in c.operands
	last := c.operands[count(c.operands) - 1]
	every prefix in object.get(spec, "remote_prefixes", []) {
		not startswith(last, prefix)
	}
}

cli_destroying contains i if {
	some i, hits in cli_hits
	some hit in hits
	hit % 10 == 4
}

cli_destroying contains i if {
	some i, _ in cli_hits
	some flag in object.get(cli_spec(commands[i]), "destructive_flags", [])
	flag in commands[i].flags
}

cli_destroying contains i if {
	some i, _ in cli_hits
	object.get(commands[i], ["http", "method"], "") == "DELETE"
}

ask contains {"code": "toolcall.cli_destructive", "reason": sprintf("a destructive %s command needs approval: %s", [commands[i].name, shown(commands[i])])} if {
	some i in cli_destroying
}

ask contains {"code": "toolcall.cli_verb", "reason": sprintf("this %s command is not known to only read: %s", [commands[i].name, shown(commands[i])])} if {
	some i, _ in cli_hits
	not i in cli_destroying
	not object.get(cli_class, i, "") in {"read", "local"}
}

cli_reads contains i if {
	cli_class[i] == "read"
	not i in cli_destroying
	not http_write(commands[i])
}

# -- HTTP writes from shell commands (curl, wget, gh api, code) ------------------------------------------

http_write(c) if not object.get(c, ["http", "method"], "GET") in conf("read_methods")

ask contains {"code": "toolcall.external_write", "reason": sprintf("sending data to a host outside the allow list: %s", [shown(c)])} if {
	some c in commands
	http_write(c)
	urls := object.get(c, ["http", "urls"], [])
	count([u | some u in urls; url_allowed(u)]) < max([count(urls), 1])
}

ask contains {"code": "toolcall.delete", "reason": sprintf("an HTTP DELETE needs approval: %s", [shown(c)])} if {
	some c in commands
	object.get(c, ["http", "method"], "") == "DELETE"
}

ask contains {"code": "toolcall.external_write", "reason": sprintf("%s changes data through its API: %s", [commands[i].name, shown(commands[i])])} if {
	some i, _ in cli_hits
	http_write(commands[i])
}

# -- secrets flowing to the network (sources and sinks, gateway/toolcalls/secretflow.py) -------------------

# A command that gets sensitive data (a key or credential file, the environment, a secret's variable, a
# substitution over them, its pipeline's input from them) and sends data off the machine (URLs, headers,
# cookies, @file, DNS names, package indexes, git remotes, a network program's input, /dev/tcp, code that opens
# connections). A secret's variable (a placeholder) sent only to hosts on the session's allow list is the
# ordinary use of a session secret: the proxy swaps the placeholder there and nowhere else (and so is a CLI's
# own credential given in its options).
exfiltrating contains i if {
	some i, c in commands
	count(leaving(c)) > 0
	some s in object.get(c, "sources", [])
	not placeholder_to_allowed(s, c)
}

# leaving(c): the sinks of c off this machine (a loopback host keeps the data here).
leaving(c) := [k | some k in object.get(c, "sinks", []); object.get(k, "local", false) != true]

placeholder_to_allowed(s, c) if {
	s.kind == "env"
	every k in leaving(c) {
		sink_allowed(k)
	}
}

# A cloud, cluster or forge CLI given a secret's variable uses it as its own credential.
sink_allowed(k) if k.kind == "cli"

sink_allowed(k) if {
	object.get(k, "host", "") != ""
	data.sandgate.lib.hosts.allowlisted(object.get(input, ["session", "allow"], []), k.host, object.get(k, "port", 0))
}

ask contains {"code": "toolcall.exfiltration", "reason": sprintf("sensitive data (%s) would leave the machine (%s): %s", [concat(", ", {s.name | some s in commands[i].sources}), concat(", ", {k.kind | some k in leaving(commands[i])}), shown(commands[i])])} if {
	some i in exfiltrating
}

# -- reads (what a frozen session still allows) ----------------------------------------------------------

readish(_, c) if c.name in conf("read_commands")

readish(_, c) if sub(c) in object.get(conf_map("read_subcommands"), c.name, [])

readish(_, c) if sql_read(c.sql)

readish(i, _) if i in cli_reads

reads contains i if {
	some i, c in commands
	readish(i, c)
	object.get(c, "dynamic", true) == false
	not file_delete(c)
	not http_write(c)
	not c.remote
	every key in ["writes", "deletes", "moves", "executes"] {
		count(object.get(c, key, [])) == 0
	}
}
