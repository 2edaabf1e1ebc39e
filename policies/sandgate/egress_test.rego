package sandgate.egress_test

import rego.v1

import data.sandgate.egress

sess(extra) := object.union({"id": "s1", "workload": "ephemeral", "labels": {}, "frozen": false, "allow": ["example.com", "*.github.com", "pinned.test:8443"]}, extra)

req(extra) := object.union({"method": "GET", "scheme": "https", "host": "example.com", "port": 443, "path": "/", "query": {}, "headers": {}, "ip": "", "ip_class": ""}, extra)

inp(s, r) := {"kind": "egress", "session": sess(s), "request": req(r)}

test_allow_listed_host if {
	d := egress.decide(inp({}, {}))
	d.action == "allow"
}

test_allow_wildcard_subdomain if {
	d := egress.decide(inp({}, {"host": "api.github.com"}))
	d.action == "allow"
}

test_deny_wildcard_apex if {
	d := egress.decide(inp({}, {"host": "github.com"}))
	d.action == "deny"
	d.codes == ["egress.not_allowlisted"]
}

test_allow_pinned_port if {
	d := egress.decide(inp({}, {"host": "pinned.test", "port": 8443}))
	d.action == "allow"
}

test_deny_pinned_other_port if {
	d := egress.decide(inp({}, {"host": "pinned.test", "port": 443}))
	d.action == "deny"
}

test_deny_unlisted if {
	d := egress.decide(inp({}, {"host": "evil.test"}))
	d.codes == ["egress.not_allowlisted"]
}

test_deny_ephemeral_base_allow if {
	d := egress.decide(inp({}, {"host": "pypi.org"}))
	d.action == "deny"
}

test_allow_persistent_base_allow if {
	d := egress.decide(inp({"workload": "persistent"}, {"host": "pypi.org"}))
	d.action == "allow"
}

test_deny_private_ip_class if {
	d := egress.decide(inp({}, {"ip": "10.0.0.1", "ip_class": "private"}))
	d.action == "deny"
	"address.private" in d.codes
}

test_ask_delete if {
	d := egress.decide(inp({}, {"method": "DELETE"}))
	d.action == "ask"
	d.codes == ["egress.method_ask"]
}

test_ask_git_push if {
	d := egress.decide(inp({}, {"method": "POST", "path": "/o/r.git/git-receive-pack"}))
	d.codes == ["egress.git_push"]
}

test_allow_git_fetch if {
	d := egress.decide(inp({}, {"method": "POST", "path": "/o/r.git/git-upload-pack"}))
	d.action == "allow"
}

test_ask_frozen_post if {
	d := egress.decide(inp({"frozen": true}, {"method": "POST"}))
	d.codes == ["egress.frozen"]
}

test_allow_frozen_get if {
	d := egress.decide(inp({"frozen": true}, {}))
	d.action == "allow"
}

test_allow_frozen_connect if {
	d := egress.decide(inp({"frozen": true}, {"method": "CONNECT", "path": ""}))
	d.action == "allow"
}

test_allow_frozen_git_upload_pack if {
	d := egress.decide(inp({"frozen": true}, {"method": "POST", "path": "/r.git/git-upload-pack"}))
	d.action == "allow"
}

test_deny_beats_ask if {
	d := egress.decide(inp({}, {"method": "DELETE", "host": "evil.test"}))
	d.action == "deny"
}

test_deny_missing_request if {
	d := egress.decide({"kind": "egress", "session": sess({})})
	d.action == "deny"
}

test_deny_missing_session if {
	d := egress.decide({"kind": "egress", "request": req({})})
	d.action == "deny"
}
