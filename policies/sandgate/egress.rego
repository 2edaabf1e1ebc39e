# Egress decisions: one per CONNECT and one per request inside a tunnel or plain HTTP.
#
# Rules add {"code", "reason"} items to the partial sets deny, ask and allow; `decision` combines them
# (data.sandgate.lib.decision: deny beats ask beats allow, nothing is deny). A site adds its own rules to
# these sets in its own files of `package sandgate.egress` (see policies/README.md).
#
# Shipped rules: a host on the session's allow list (plus, for a persistent session, the base allowlist in
# data.sandgate.config.egress.base_allow, and for the sessions an entry names, scoped_allow) is allowed; a
# request nothing allows is denied as not allowlisted; an address class other than public (or a private range
# sandgate was told to allow) is denied; DELETE and git pushes ask; a frozen session asks for every method but
# reads.
package sandgate.egress

import rego.v1

import data.sandgate.lib.decision as decision_lib
import data.sandgate.lib.hosts

# METADATA
# title: Egress decision
# description: The deny, ask and allow items combined (deny beats ask beats allow; nothing is deny).
# custom:
#   code: policy.default_deny
decision := decision_lib.combine(deny, ask, allow)

# -- tunables (data.sandgate.config.egress), with defaults ------------------------------------------------

default cfg := {}

cfg := data.sandgate.config.egress

read_methods := object.get(cfg, "read_methods", ["GET", "HEAD", "OPTIONS", "CONNECT"])

ask_methods := object.get(cfg, "ask_methods", ["DELETE"])

ok_ip_classes := object.get(cfg, "ok_ip_classes", ["", "public", "allowed_private"])

base_allow := object.get(cfg, "base_allow", [])

# -- facts about the request ------------------------------------------------------------------------------

# Messages format only strings: a field of another type is shown by a fixed word.
method := upper(input.request.method) if is_string(input.request.method)

host := input.request.host if {
	is_string(input.request.host)
} else := "the destination"

ip_class := object.get(input, ["request", "ip_class"], "")

session_allow := input.session.allow if {
	is_array(input.session.allow)
} else := []

# host_listed: the session's allow list, or for a persistent session the base allowlist, has the host.
host_forms := hosts.forms(input.request.host, input.request.port)

host_listed if {
	some form in host_forms
	form in session_allow
}

host_listed if {
	input.session.workload == "persistent"
	is_array(base_allow)
	some form in host_forms
	form in base_allow
}

ip_class_ok if ip_class in ok_ip_classes

method_name := method if is_string(method) else := "this request"

reads_only if method in read_methods

reads_only if endswith(input.request.path, "/git-upload-pack")

# -- allow ------------------------------------------------------------------------------------------------

# METADATA
# title: Allowed host
# description: The host is on the session's allow list, or a persistent session's base allowlist.
# custom:
#   code: egress.allowed
allow contains item if {
	host_listed
	item := {"code": "egress.allowed", "reason": sprintf("%s is allowed for this session", [host])}
}

# A site's scoped allowlist: each entry of data.sandgate.config.egress.scoped_allow lists hosts (entry texts as in
# base_allow) for the sessions it names by `workload` and `labels` (both optional; an entry naming neither is for
# every session). `sandgate policy suggest` proposes entries from repeated denials and access requests.
# METADATA
# title: Scoped allowlist
# description: A scoped_allow entry lists the host for sessions of this workload and these labels.
# custom:
#   code: egress.scoped_allow
allow contains item if {
	some rule in scoped_allow
	scope_matches(rule)
	some form in host_forms
	form in rule.hosts
	item := {"code": "egress.scoped_allow", "reason": sprintf("%s is allowed for this session's workload and labels (scoped_allow)", [host])}
}

scoped_allow := rules if {
	rules := object.get(cfg, "scoped_allow", [])
	is_array(rules)
} else := []

scope_matches(rule) if {
	is_array(rule.hosts)
	scope_workload(rule)
	labels := object.get(rule, "labels", {})
	is_object(labels)
	every k, v in labels {
		input.session.labels[k] == v
	}
}

scope_workload(rule) if not "workload" in object.keys(rule)

scope_workload(rule) if rule.workload == input.session.workload

# An approved access request: input.session.grants holds the session's live grants only (sandgate drops expired
# and withdrawn ones, so no clock is needed). A grant opens the host's tunnel (CONNECT) and covers the requests of
# its methods under its path prefix (of input.request.path_normalised, at a segment boundary). Every deny and ask
# rule still applies.
# METADATA
# title: Granted access
# description: An approved access request's live grant covers the request (its host, port, methods, path prefix).
# custom:
#   code: egress.granted
allow contains item if {
	some g in session_grants
	grant_covers(g)
	item := {"code": "egress.granted", "reason": sprintf("%s is granted to this session (approval %v)", [host, g.approval])}
}

session_grants := input.session.grants if {
	is_array(input.session.grants)
} else := []

grant_covers(g) if {
	grant_destination(g)
	input.request.method == "CONNECT"
}

grant_covers(g) if {
	grant_destination(g)
	method in g.methods
	is_string(input.request.path_normalised)
	path_under(input.request.path_normalised, g.path_prefix)
}

grant_destination(g) if {
	g.host == input.request.host
	g.port == null
}

grant_destination(g) if {
	g.host == input.request.host
	g.port == input.request.port
}

path_under(_, prefix) if trim_right(prefix, "/") == ""

path_under(p, prefix) if {
	p != ""
	p == trim_right(prefix, "/")
}

path_under(p, prefix) if {
	p != ""
	startswith(p, concat("", [trim_right(prefix, "/"), "/"]))
}

# -- deny -------------------------------------------------------------------------------------------------

# METADATA
# title: Not allowlisted
# description: Nothing (shipped or site rule) allows this destination.
# custom:
#   code: egress.not_allowlisted
deny contains item if {
	count(allow) == 0
	not in_tunnel
	item := {"code": "egress.not_allowlisted", "reason": sprintf("%s is not on this session's allow list", [host])}
}

# Inside a tunnel whose CONNECT was allowed, nothing allows this request: a rule allowed the host for some
# methods or paths only (for HTTPS the CONNECT is decided first, then each request in the tunnel).
# METADATA
# title: Request not allowed in an allowed tunnel
# description: The tunnel's CONNECT was allowed, but no allow covers this request.
# custom:
#   code: egress.request_not_allowed
deny contains item if {
	count(allow) == 0
	in_tunnel
	item := {
		"code": "egress.request_not_allowed",
		"reason": sprintf("no rule allows this %s to %s: its tunnel was allowed, but no allow covers this request (a rule may allow only some methods or paths)", [method_name, host]),
	}
}

in_tunnel if input.request.tunnel == true

# METADATA
# title: Address class
# description: The destination's address class is not public nor an allowed private range (code address.CLASS).
# custom:
#   code: address.CLASS
deny contains item if {
	not ip_class_ok
	class := ip_class_name
	item := {
		"code": sprintf("address.%s", [class]),
		"reason": sprintf("destination address class %s is not allowed%s", [class, private_allow_hint(class)]),
	}
}

# The classes an operator can allow by range name the key that does it (as the proxy's address check does).
private_allow_hint(class) := " (egress.private_allow can allow its range)" if {
	class in {"private", "loopback", "link_local", "cgnat"}
} else := ""

ip_class_name := ip_class if is_string(ip_class) else := "invalid"

# A package file (PyPI sdist or wheel, npm tarball) that an OSV malicious-package record lists. sandgate fills
# input.request.package for downloads from registry hosts; advisories are the record ids (MAL-...).
# METADATA
# title: Malicious package
# description: An OSV malicious-package record lists this package version.
# custom:
#   code: package.malicious
deny contains item if {
	count(package_advisories) > 0
	item := {
		"code": "package.malicious",
		"reason": sprintf("%s is a known malicious package (%s)", [package_label, concat(", ", package_advisories)]),
	}
}

# A package whose facts cannot be read is not downloaded either.
# METADATA
# title: Unreadable package facts
# description: A package download whose advisories cannot be read.
# custom:
#   code: package.malicious
deny contains {"code": "package.malicious", "reason": "the package download's advisories cannot be read"} if {
	input.request.package
	not is_array(input.request.package.advisories)
}

package_advisories := [sprintf("%v", [a]) | some a in input.request.package.advisories] if {
	is_array(input.request.package.advisories)
}

package_label := sprintf("%v %v %v", [pkg.ecosystem, pkg.name, pkg.version]) if {
	pkg := input.request.package
	pkg.version != ""
} else := sprintf("%v %v (its version unreadable)", [input.request.package.ecosystem, input.request.package.name])

# -- ask --------------------------------------------------------------------------------------------------

# METADATA
# title: Method asks
# description: A method in ask_methods (DELETE by default) needs approval.
# custom:
#   code: egress.method_ask
ask contains item if {
	method in ask_methods
	item := {"code": "egress.method_ask", "reason": sprintf("%s requests need approval", [method])}
}

# METADATA
# title: Git push
# description: A git push (git-receive-pack) needs approval.
# custom:
#   code: egress.git_push
ask contains {"code": "egress.git_push", "reason": "git push needs approval"} if {
	endswith(input.request.path, "/git-receive-pack")
}

# A budget of the session is spent ([budgets.WORKLOAD], or its own set by PATCH /v1/sessions/{id}): every
# request asks. sandgate lists the spent budgets in input.session.budgets_spent (counters vs budgets, both in
# input.session). A CONNECT only opens a tunnel: the requests inside it ask.
# METADATA
# title: Budget spent
# description: A budget of the session is spent, so every request asks.
# custom:
#   code: budget.exceeded
ask contains item if {
	count(budgets_spent) > 0
	method != "CONNECT"
	item := {"code": "budget.exceeded", "reason": sprintf("the session spent its %s budget: every request needs approval", [concat(", ", budgets_spent)])}
}

budgets_spent := [sprintf("%v", [b]) | some b in input.session.budgets_spent] if {
	is_array(input.session.budgets_spent)
} else := []

# METADATA
# title: Frozen session
# description: A frozen session asks for every method but reads.
# custom:
#   code: egress.frozen
ask contains item if {
	input.session.frozen == true
	not reads_only
	item := {"code": "egress.frozen", "reason": sprintf("session is frozen: %s needs approval", [method_name])}
}

# -- AWS operations (input.request.aws: a call signed with the session's aws placeholder keys) ----------------
# Patterns are globs on botocore's operation name ("Delete*"), or on "service:Operation" with the signing name
# ("iam:Create*", "sts:AssumeRole*").

aws_ask_operations := object.get(cfg, "aws_ask_operations", ["Delete*", "Terminate*", "Remove*", "Detach*",
	"Revoke*", "Disable*", "Stop*", "Put*Policy", "Update*Policy", "Create*AccessKey", "iam:Create*", "iam:Put*",
	"iam:Attach*", "iam:Update*", "iam:Add*", "iam:Set*", "iam:Tag*", "iam:Untag*", "iam:Upload*", "iam:Change*",
	"iam:Enable*", "iam:Deactivate*", "iam:Reset*", "iam:Resync*"])

aws_credential_operations := object.get(cfg, "aws_credential_operations", ["sts:AssumeRole*", "sts:AssumeRoot",
	"sts:GetSessionToken", "sts:GetFederationToken", "awsssoportal:GetRoleCredentials", "sso:GetRoleCredentials",
	"cognito-identity:GetCredentialsForIdentity", "cognito-identity:GetOpenIdToken*", "iam:CreateAccessKey",
	"iam:CreateServiceSpecificCredential", "iam:CreateLoginProfile", "iam:UpdateLoginProfile",
	"ecr:GetAuthorizationToken", "ecr-public:GetAuthorizationToken", "codeartifact:GetAuthorizationToken",
	"redshift:GetClusterCredentials*", "redshift-serverless:GetCredentials", "rds-db:connect"])

aws_operation := input.request.aws.operation if {
	is_string(input.request.aws.operation)
	input.request.aws.operation != ""
}

aws_service := input.request.aws.service if is_string(input.request.aws.service) else := ""

aws_resource := input.request.aws.resource if {
	is_string(input.request.aws.resource)
	input.request.aws.resource != ""
} else := "its resource"

aws_names := {aws_operation, sprintf("%s:%s", [aws_service, aws_operation])}

aws_matches(patterns) if {
	some pattern in patterns
	is_string(pattern)
	some name in aws_names
	contains(pattern, ":") == contains(name, ":")
	glob.match(pattern, [], name)
}

# METADATA
# title: AWS credential operation
# description: An AWS operation that hands out credentials (aws_credential_operations) is denied.
# custom:
#   code: aws.credential_operation
deny contains item if {
	aws_operation
	aws_matches(aws_credential_operations)
	item := {
		"code": "aws.credential_operation",
		"reason": sprintf("AWS %s %s hands out credentials: not from a sandbox", [aws_service, aws_operation]),
	}
}

# METADATA
# title: AWS operation asks
# description: An AWS operation listed in aws_ask_operations needs approval.
# custom:
#   code: aws.operation_ask
ask contains item if {
	aws_operation
	aws_matches(aws_ask_operations)
	item := {
		"code": "aws.operation_ask",
		"reason": sprintf("AWS %s %s on %s needs approval", [aws_service, aws_operation, aws_resource]),
	}
}
