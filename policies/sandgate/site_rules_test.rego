# How site rules combine with the shipped ones: a site's items join the same partial sets (simulated here with
# `with data.sandgate.<kind>.<set> as`), and deny beats ask beats allow whoever wrote the rule.
package sandgate.site_rules_test

import rego.v1

import data.sandgate.egress
import data.sandgate.toolcall

site_deny := {{"code": "site.blocked", "reason": "blocked by the site"}}

site_ask := {{"code": "site.review", "reason": "the site reviews this", "ttl_s": 120}}

egress_input := {
	"kind": "egress",
	"session": {"id": "s1", "workload": "ephemeral", "allow": ["example.com"], "frozen": false},
	"request": {"method": "GET", "host": "example.com", "port": 443, "path": "/", "ip_class": ""},
}

toolcall_input := {
	"kind": "toolcall",
	"session": {"id": "s1", "workload": "persistent", "frozen": false, "workspace": "/workspace"},
	"tool": {"name": "list_files", "args": {}},
}

test_deny_site_rule_beats_shipped_allow_egress if {
	d := egress.decision with input as egress_input with egress.deny as site_deny
	d == {"action": "deny", "reasons": ["blocked by the site"], "codes": ["site.blocked"]}
}

test_ask_site_rule_with_ttl_egress if {
	d := egress.decision with input as egress_input with egress.ask as site_ask
	d == {"action": "ask", "reasons": ["the site reviews this"], "codes": ["site.review"], "ttl_s": 120}
}

test_allow_shipped_toolcall_read if {
	d := toolcall.decision with input as toolcall_input
	d.action == "allow"
}

test_deny_site_rule_beats_shipped_allow_toolcall if {
	d := toolcall.decision with input as toolcall_input with toolcall.deny as site_deny
	d.action == "deny"
	d.codes == ["site.blocked"]
}

test_ask_site_rule_toolcall if {
	d := toolcall.decision with input as toolcall_input with toolcall.ask as site_ask
	d.action == "ask"
	d.codes == ["site.review"]
}

test_deny_toolcall_without_tool if {
	d := toolcall.decision with input as {"kind": "toolcall"}
	d.action == "deny"
}
