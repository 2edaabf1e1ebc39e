# Egress decisions: one per CONNECT and per request inside a tunnel or plain HTTP.
#
# Default deny. A request is allowed when its host is on the session's allow list (plus, for a
# persistent session, data.sandgate.config.egress.base_allow) and no deny reason exists. DELETE and
# git pushes ask; a frozen session asks for every write. Address classification is done by sandgate
# in Python (regopy has no net.* builtins) and handed in as input.request.ip_class.
#
# Written as functions of the input document (`decide(inp)`), so tests call them with plain values:
# the embedded engine (regopy) does not support `with input as` reliably. Each fact is computed once
# (`facts`), because regopy does not memoise function calls and this rule runs on every request.
package sandgate.egress

import rego.v1

import data.sandgate.lib.hosts

default cfg := {}

cfg := data.sandgate.config.egress

read_methods := object.get(cfg, "read_methods", ["GET", "HEAD", "OPTIONS", "CONNECT"])

ask_methods := object.get(cfg, "ask_methods", ["DELETE"])

ok_ip_classes := object.get(cfg, "ok_ip_classes", ["", "public", "allowed_private"])

base_allow := object.get(cfg, "base_allow", [])

decision := decide(input)

# -- the decision ------------------------------------------------------------------------------

decide(inp) := d if {
	r := object.get(inp, "request", {})
	s := object.get(inp, "session", {})
	f := facts(r, s)
	ds := denies(f)
	ks := asks(f)
	d := choose(f, ds, ks)
}

# sandgate hands the method in upper case and the host normalised; no upper() here: regopy keeps
# quotes around builtin results inside sprintf.
facts(r, s) := {
	"method": object.get(r, "method", ""),
	"host": object.get(r, "host", ""),
	"path": object.get(r, "path", ""),
	"ip_class": object.get(r, "ip_class", ""),
	"frozen": object.get(s, "frozen", false) == true,
	"allowed": hosts.allowlisted(allowlist(s), object.get(r, "host", ""), object.get(r, "port", 0)),
}

allowlist(s) := array.concat(object.get(s, "allow", []), base_allow) if {
	object.get(s, "workload", "") == "persistent"
} else := object.get(s, "allow", [])

# -- deny reasons ------------------------------------------------------------------------------

denies(f) := array.concat(not_listed(f), bad_address(f))

not_listed(f) := [] if f.allowed else := [{"code": "egress.not_allowlisted", "reason": sprintf("%s is not on this session's allow list", [f.host])}]

bad_address(f) := [] if f.ip_class in ok_ip_classes else := [{"code": sprintf("address.%s", [f.ip_class]), "reason": sprintf("destination address class %s is not allowed", [f.ip_class])}]

# -- ask reasons -------------------------------------------------------------------------------

asks(f) := array.concat(array.concat(method_ask(f), git_push(f)), frozen_write(f))

method_ask(f) := [{"code": "egress.method_ask", "reason": sprintf("%s requests need approval", [f.method])}] if {
	f.method in ask_methods
} else := []

git_push(f) := [{"code": "egress.git_push", "reason": "git push needs approval"}] if {
	endswith(f.path, "/git-receive-pack")
} else := []

frozen_write(f) := [{"code": "egress.frozen", "reason": sprintf("session is frozen: %s needs approval", [f.method])}] if {
	f.frozen
	not f.method in read_methods
	not endswith(f.path, "/git-upload-pack")
} else := []

choose(f, ds, ks) := {"action": "deny", "reasons": [i.reason | some i in ds], "codes": [i.code | some i in ds]} if {
	count(ds) > 0
} else := {"action": "ask", "reasons": [i.reason | some i in ks], "codes": [i.code | some i in ks]} if {
	count(ks) > 0
} else := {"action": "allow", "reasons": [sprintf("%s is allowed for this session", [f.host])], "codes": ["egress.allowed"]} if {
	f.allowed
} else := {"action": "deny", "reasons": ["no rule allows this request"], "codes": ["egress.default_deny"]}
