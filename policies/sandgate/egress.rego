# Egress decisions: one per CONNECT and per request inside a tunnel or plain HTTP.
#
# Default deny. A request is allowed when its host is on the session's allow list (plus, for a
# persistent session, data.sandgate.config.egress.base_allow) and no deny reason exists. DELETE and
# git pushes ask; a frozen session asks for every write. Address classification is done by sandgate
# in Python (regopy has no net.* builtins) and handed in as input.request.ip_class.
#
# Written as functions of the input document (`decide(inp)`), so tests call them with plain values:
# the embedded engine (regopy) does not support `with input as` reliably.
package sandgate.egress

import rego.v1

import data.sandgate.lib.hosts

default cfg := {}

cfg := data.sandgate.config.egress

read_methods := object.get(cfg, "read_methods", ["GET", "HEAD", "OPTIONS", "CONNECT"])

ask_methods := object.get(cfg, "ask_methods", ["DELETE"])

ok_ip_classes := object.get(cfg, "ok_ip_classes", ["", "public", "allowed_private"])

decision := decide(input)

# -- accessors (missing fields become empty values, which never allow) --------------------------

req(inp) := object.get(inp, "request", {})

sess(inp) := object.get(inp, "session", {})

# sandgate hands the method in upper case; no upper() here: regopy quotes builtin results inside sprintf.
method(inp) := object.get(req(inp), "method", "")

host(inp) := object.get(req(inp), "host", "")

path(inp) := object.get(req(inp), "path", "")

allowlist(inp) := array.concat(object.get(sess(inp), "allow", []), object.get(cfg, "base_allow", [])) if {
	object.get(sess(inp), "workload", "") == "persistent"
} else := object.get(sess(inp), "allow", [])

host_allowed(inp) if hosts.allowlisted(allowlist(inp), host(inp), object.get(req(inp), "port", 0))

frozen(inp) if object.get(sess(inp), "frozen", false) == true

# -- deny reasons ------------------------------------------------------------------------------

not_listed(inp) := [{"code": "egress.not_allowlisted", "reason": sprintf("%s is not on this session's allow list", [host(inp)])}] if {
	not host_allowed(inp)
} else := []

bad_address(inp) := [{"code": sprintf("address.%s", [cls]), "reason": sprintf("destination address class %s is not allowed", [cls])}] if {
	cls := object.get(req(inp), "ip_class", "")
	not cls in ok_ip_classes
} else := []

denies(inp) := array.concat(not_listed(inp), bad_address(inp))

# -- ask reasons -------------------------------------------------------------------------------

method_ask(inp) := [{"code": "egress.method_ask", "reason": sprintf("%s requests need approval", [method(inp)])}] if {
	method(inp) in ask_methods
} else := []

git_push(inp) := [{"code": "egress.git_push", "reason": "git push needs approval"}] if {
	endswith(path(inp), "/git-receive-pack")
} else := []

frozen_write(inp) := [{"code": "egress.frozen", "reason": sprintf("session is frozen: %s needs approval", [method(inp)])}] if {
	frozen(inp)
	not method(inp) in read_methods
	not endswith(path(inp), "/git-upload-pack")
} else := []

asks(inp) := array.concat(array.concat(method_ask(inp), git_push(inp)), frozen_write(inp))

# -- the decision ------------------------------------------------------------------------------

decide(inp) := {"action": "deny", "reasons": reasons(denies(inp)), "codes": codes(denies(inp))} if {
	count(denies(inp)) > 0
} else := {"action": "ask", "reasons": reasons(asks(inp)), "codes": codes(asks(inp))} if {
	count(asks(inp)) > 0
} else := {"action": "allow", "reasons": [sprintf("%s is allowed for this session", [host(inp)])], "codes": ["egress.allowed"]} if {
	host_allowed(inp)
} else := {"action": "deny", "reasons": ["no rule allows this request"], "codes": ["egress.default_deny"]}

reasons(items) := [i.reason | some i in items]

codes(items) := [i.code | some i in items]
