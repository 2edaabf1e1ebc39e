package sandgate.egress_test

import rego.v1

import data.sandgate.egress

session := {
	"id": "s1", "workload": "ephemeral", "labels": {}, "frozen": false,
	"allow": ["example.com", "*.github.com", "pinned.test:8443"],
}

request := {
	"method": "GET", "scheme": "https", "host": "example.com", "port": 443, "path": "/",
	"query": {}, "headers": {}, "ip": "", "ip_class": "",
}

# inp: the base input with some request and session fields replaced.
inp(r, s) := {"kind": "egress", "session": object.union(session, s), "request": object.union(request, r)}

test_allow_listed_host if {
	d := egress.decision with input as inp({}, {})
	d.action == "allow"
	d.codes == ["egress.allowed"]
	d.reasons == ["example.com is allowed for this session"]
}

test_allow_wildcard_subdomain if {
	egress.decision.action == "allow" with input as inp({"host": "api.github.com"}, {})
}

test_deny_wildcard_apex if {
	d := egress.decision with input as inp({"host": "github.com"}, {})
	d.action == "deny"
	d.codes == ["egress.not_allowlisted"]
	d.reasons == ["github.com is not on this session's allow list"]
}

test_allow_pinned_port if {
	egress.decision.action == "allow" with input as inp({"host": "pinned.test", "port": 8443}, {})
}

test_deny_pinned_other_port if {
	d := egress.decision with input as inp({"host": "pinned.test", "port": 443}, {})
	d.codes == ["egress.not_allowlisted"]
}

test_deny_unlisted if {
	d := egress.decision with input as inp({"host": "evil.test"}, {})
	d.action == "deny"
	d.codes == ["egress.not_allowlisted"]
}

test_deny_ephemeral_base_allow if {
	d := egress.decision with input as inp({"host": "pypi.org"}, {})
	d.codes == ["egress.not_allowlisted"]
}

test_allow_persistent_base_allow if {
	d := egress.decision with input as inp({"host": "pypi.org"}, {"workload": "persistent"})
	d.action == "allow"
}

test_allow_persistent_base_allow_from_data if {
	d := egress.decision with input as inp({"host": "mirror.test"}, {"workload": "persistent"})
		with data.sandgate.config.egress.base_allow as ["mirror.test"]
	d.action == "allow"
}

test_deny_persistent_without_base_allow_data if {
	d := egress.decision with input as inp({"host": "pypi.org"}, {"workload": "persistent"})
		with data.sandgate.config.egress as {}
	d.codes == ["egress.not_allowlisted"]
}

test_deny_private_ip_class if {
	d := egress.decision with input as inp({"ip": "10.0.0.1", "ip_class": "private"}, {})
	d.action == "deny"
	d.codes == ["address.private"]
	d.reasons == ["destination address class private is not allowed (egress.private_allow can allow its range)"]
}

test_allow_allowed_private_ip_class if {
	d := egress.decision with input as inp({"ip": "10.0.0.1", "ip_class": "allowed_private"}, {})
	d.action == "allow"
}

test_allow_missing_ip_class_field if {
	d := egress.decision with input as {"kind": "egress", "session": session, "request": object.remove(request, ["ip_class"])}
	d.action == "allow"
}

test_ask_delete if {
	d := egress.decision with input as inp({"method": "DELETE"}, {})
	d.action == "ask"
	d.codes == ["egress.method_ask"]
	d.reasons == ["DELETE requests need approval"]
}

test_ask_delete_lower_case if {
	d := egress.decision with input as inp({"method": "delete"}, {})
	d.codes == ["egress.method_ask"]
}

test_ask_method_from_data if {
	d := egress.decision with input as inp({"method": "PUT"}, {})
		with data.sandgate.config.egress.ask_methods as ["PUT"]
	d.codes == ["egress.method_ask"]
}

test_ask_git_push if {
	d := egress.decision with input as inp({"method": "POST", "path": "/o/r.git/git-receive-pack"}, {})
	d.action == "ask"
	d.codes == ["egress.git_push"]
}

test_allow_git_fetch if {
	d := egress.decision with input as inp({"method": "POST", "path": "/o/r.git/git-upload-pack"}, {})
	d.action == "allow"
}

test_ask_frozen_post if {
	d := egress.decision with input as inp({"method": "POST"}, {"frozen": true})
	d.action == "ask"
	d.codes == ["egress.frozen"]
	d.reasons == ["session is frozen: POST needs approval"]
}

test_ask_frozen_delete_has_both_codes if {
	d := egress.decision with input as inp({"method": "DELETE"}, {"frozen": true})
	d.codes == ["egress.frozen", "egress.method_ask"]
}

test_ask_frozen_missing_method if {
	d := egress.decision with input as {"kind": "egress", "session": object.union(session, {"frozen": true}), "request": object.remove(request, ["method"])}
	d.action == "ask"
	d.codes == ["egress.frozen"]
}

test_allow_frozen_get if {
	egress.decision.action == "allow" with input as inp({}, {"frozen": true})
}

test_allow_frozen_connect if {
	egress.decision.action == "allow" with input as inp({"method": "CONNECT", "path": ""}, {"frozen": true})
}

test_allow_frozen_git_upload_pack if {
	d := egress.decision with input as inp({"method": "POST", "path": "/r.git/git-upload-pack"}, {"frozen": true})
	d.action == "allow"
}

test_deny_beats_ask if {
	d := egress.decision with input as inp({"method": "DELETE", "host": "evil.test"}, {})
	d.action == "deny"
	d.codes == ["egress.not_allowlisted"]
}

test_deny_missing_request if {
	d := egress.decision with input as {"kind": "egress", "session": session}
	d.action == "deny"
	d.codes == ["egress.not_allowlisted"]
}

test_deny_missing_session if {
	d := egress.decision with input as {"kind": "egress", "request": request}
	d.action == "deny"
	d.codes == ["egress.not_allowlisted"]
}

# Only inputs sandgate can build here: a site rule (loaded beside these tests) need not be null-safe. Inputs of
# the wrong type are tested in tests/gateway/policy/test_site_rule_safety.py against the shipped files alone.
test_deny_missing_host if {
	d := egress.decision with input as {"kind": "egress", "session": session, "request": object.remove(request, ["host"])}
	d.action == "deny"
}

test_deny_empty_input if {
	egress.decision.action == "deny" with input as {}
}

test_allow_site_rule_adds_a_host if {
	d := egress.decision with input as inp({"host": "intranet.test"}, {})
		with egress.allow as {{"code": "site.intranet", "reason": "the intranet is open"}}
	d.action == "allow"
	d.codes == ["site.intranet"]
}

# -- package downloads ------------------------------------------------------------------------------------

package_download(advisories) := {
	"host": "registry.npmjs.org", "path": "/@ctrl/tinycolor/-/tinycolor-4.1.1.tgz",
	"package": {"ecosystem": "npm", "name": "@ctrl/tinycolor", "version": "4.1.1", "advisories": advisories},
}

test_deny_listed_package_download if {
	d := egress.decision with input as inp(package_download(["MAL-2025-47141"]), {"allow": ["registry.npmjs.org"]})
	d.action == "deny"
	d.codes == ["package.malicious"]
	d.reasons == ["npm @ctrl/tinycolor 4.1.1 is a known malicious package (MAL-2025-47141)"]
}

test_allow_clean_package_download if {
	d := egress.decision with input as inp(package_download([]), {"allow": ["registry.npmjs.org"]})
	d.action == "allow"
}

test_deny_package_with_unreadable_version_names_it if {
	r := json.patch(package_download(["MAL-1", "MAL-2"]), [{"op": "replace", "path": "/package/version", "value": ""}])
	d := egress.decision with input as inp(r, {"allow": ["registry.npmjs.org"]})
	d.codes == ["package.malicious"]
	d.reasons == ["npm @ctrl/tinycolor (its version unreadable) is a known malicious package (MAL-1, MAL-2)"]
}

test_deny_package_with_malformed_advisories if {
	r := json.patch(package_download([]), [{"op": "replace", "path": "/package/advisories", "value": "MAL-1"}])
	d := egress.decision with input as inp(r, {"allow": ["registry.npmjs.org"]})
	d.action == "deny"
	d.codes == ["package.malicious"]
}

# -- budgets -------------------------------------------------------------------------------------------------

test_spent_budget_asks_for_every_request if {
	d := egress.decision with input as inp({}, {"budgets_spent": ["bytes_in"]})
	d.action == "ask"
	"budget.exceeded" in d.codes
	d.reasons == ["the session spent its bytes_in budget: every request needs approval"]
}

test_spent_budget_leaves_connect_to_the_requests_inside if {
	d := egress.decision with input as inp({"method": "CONNECT", "path": ""}, {"budgets_spent": ["requests"]})
	d.action == "allow"
}

test_no_budget_spent_changes_nothing if {
	egress.decision.action == "allow" with input as inp({}, {"budgets_spent": [], "budgets": {"requests": 5}, "stats": {"requests": 4}})
}

test_spent_budget_never_lifts_a_deny if {
	d := egress.decision with input as inp({"host": "unlisted.test"}, {"budgets_spent": ["requests"]})
	d.action == "deny"
}

test_deny_in_an_allowed_tunnel_says_no_rule_allows_the_request if {
	d := egress.decision with input as inp({"host": "other.test", "method": "POST", "tunnel": true}, {})
	d.codes == ["egress.request_not_allowed"]
	d.reasons == ["no rule allows this POST to other.test: its tunnel was allowed, but no allow covers this request (a rule may allow only some methods or paths)"]
}

test_deny_outside_a_tunnel_names_the_allow_list if {
	d := egress.decision with input as inp({"host": "other.test", "method": "POST", "tunnel": false}, {})
	d.codes == ["egress.not_allowlisted"]
}

# -- AWS operations ---------------------------------------------------------------------------------------

aws(service, op) := {"method": "POST", "aws": {"service": service, "region": "us-east-1", "operation": op,
	"resource": "i-123"}}

test_aws_terminate_asks if {
	d := egress.decision with input as inp(aws("ec2", "TerminateInstances"), {})
	d.action == "ask"
	d.codes == ["aws.operation_ask"]
	d.reasons == ["AWS ec2 TerminateInstances on i-123 needs approval"]
}

test_aws_reads_allowed if {
	egress.decision.action == "allow" with input as inp(aws("ec2", "DescribeInstances"), {})
	egress.decision.action == "allow" with input as inp(aws("s3", "PutObject"), {})
}

test_aws_policy_writes_and_iam_writes_ask if {
	egress.decision.action == "ask" with input as inp(aws("s3", "PutBucketPolicy"), {})
	egress.decision.action == "ask" with input as inp(aws("iam", "CreateUser"), {})
	egress.decision.action == "allow" with input as inp(aws("sqs", "CreateQueue"), {})
}

test_aws_credential_operations_denied if {
	d := egress.decision with input as inp(aws("sts", "AssumeRole"), {})
	d.action == "deny"
	d.codes == ["aws.credential_operation"]
	egress.decision.action == "deny" with input as inp(aws("iam", "CreateAccessKey"), {})
	egress.decision.action == "deny" with input as inp(aws("ecr", "GetAuthorizationToken"), {})
	egress.decision.action == "allow" with input as inp(aws("sts", "GetCallerIdentity"), {})
}

test_aws_unknown_operation_not_matched if {
	egress.decision.action == "allow" with input as inp(aws("s3", ""), {})
	egress.decision.action == "allow" with input as inp({"aws": {"service": 3, "operation": ["x"]}}, {})
}

test_aws_lists_from_data if {
	egress.decision.action == "ask" with input as inp(aws("ec2", "DescribeInstances"), {})
		with data.sandgate.config.egress.aws_ask_operations as ["ec2:Describe*"]
	egress.decision.action == "allow" with input as inp(aws("ec2", "TerminateInstances"), {})
		with data.sandgate.config.egress.aws_ask_operations as []
}

# -- access grants (input.session.grants: live grants only) ----------------------------------------------

grant := {"host": "api.partner.test", "port": null, "methods": ["GET"], "path_prefix": "/v1/", "expires_at": 9, "approval": "a_1"}

granted(r) := inp(object.union({"host": "api.partner.test", "path_normalised": "/v1/x"}, r), {"grants": [grant]})

test_grant_allows_covered_request if {
	d := egress.decision with input as granted({})
	d.action == "allow"
	d.codes == ["egress.granted"]
}

test_grant_opens_the_tunnel if {
	egress.decision.action == "allow" with input as granted({"method": "CONNECT", "path": "", "path_normalised": ""})
}

test_grant_other_method_denied if {
	d := egress.decision with input as granted({"method": "POST", "tunnel": true})
	d.action == "deny"
	d.codes == ["egress.request_not_allowed"]
}

test_grant_path_outside_denied if {
	egress.decision.action == "deny" with input as granted({"path_normalised": "/admin"})
	egress.decision.action == "deny" with input as granted({"path_normalised": "/v1-admin"})
	egress.decision.action == "deny" with input as granted({"path_normalised": ""})
}

test_grant_prefix_itself_allowed if {
	egress.decision.action == "allow" with input as granted({"path_normalised": "/v1"})
}

test_grant_other_host_or_port_denied if {
	egress.decision.action == "deny" with input as granted({"host": "other.test"})
	egress.decision.action == "deny" with input as inp({"host": "api.partner.test", "path_normalised": "/v1/x", "port": 80}, {"grants": [object.union(grant, {"port": 443})]})
}

test_grant_asks_still_apply if {
	d := egress.decision with input as inp({"host": "api.partner.test", "path_normalised": "/v1/x", "method": "DELETE"}, {"grants": [object.union(grant, {"methods": ["DELETE"]})]})
	d.action == "ask"
}

test_grant_address_deny_still_applies if {
	d := egress.decision with input as granted({"ip_class": "loopback"})
	d.action == "deny"
}

test_grant_whole_host_covers_ambiguous_path if {
	egress.decision.action == "allow" with input as inp({"host": "api.partner.test", "path_normalised": ""}, {"grants": [object.union(grant, {"path_prefix": "/"})]})
}

test_no_grants_field_is_no_grant if {
	egress.decision.action == "deny" with input as inp({"host": "api.partner.test", "path_normalised": "/v1/x"}, {"grants": "x"})
}

# -- scoped_allow: hosts for the sessions an entry names by workload and labels ---------------------------------

scoped := [
	{"hosts": ["api.partner.test:443"], "workload": "persistent", "labels": {"team": "x"}},
	{"hosts": ["*.docs.test"]},
]

test_scoped_allow_for_its_workload_and_labels if {
	d := egress.decision with input as inp({"host": "api.partner.test"}, {"workload": "persistent", "labels": {"team": "x", "env": "dev"}})
		with data.sandgate.config.egress.scoped_allow as scoped
	d.action == "allow"
	d.codes == ["egress.scoped_allow"]
}

test_scoped_allow_not_for_other_sessions if {
	some s in [
		{"workload": "persistent", "labels": {"team": "y"}},
		{"workload": "persistent", "labels": {}},
		{"workload": "ephemeral", "labels": {"team": "x"}},
	]
	egress.decision.action == "deny" with input as inp({"host": "api.partner.test"}, s)
		with data.sandgate.config.egress.scoped_allow as scoped
}

test_scoped_allow_every_deny_still_applies if {
	d := egress.decision with input as inp({"host": "api.partner.test", "port": 8443}, {"workload": "persistent", "labels": {"team": "x"}})
		with data.sandgate.config.egress.scoped_allow as scoped
	d.action == "deny"
	d2 := egress.decision with input as inp({"host": "api.partner.test", "method": "DELETE"}, {"workload": "persistent", "labels": {"team": "x"}})
		with data.sandgate.config.egress.scoped_allow as scoped
	d2.action == "ask"
}

test_scoped_allow_without_scope_is_for_every_session if {
	egress.decision.action == "allow" with input as inp({"host": "a.docs.test"}, {})
		with data.sandgate.config.egress.scoped_allow as scoped
	egress.decision.action == "deny" with input as inp({"host": "docs.test"}, {})
		with data.sandgate.config.egress.scoped_allow as scoped
}

test_scoped_allow_malformed_is_ignored if {
	egress.decision.action == "deny" with input as inp({"host": "api.partner.test"}, {"workload": "persistent", "labels": {"team": "x"}})
		with data.sandgate.config.egress.scoped_allow as {"hosts": ["api.partner.test"]}
	egress.decision.action == "deny" with input as inp({"host": "api.partner.test"}, {})
		with data.sandgate.config.egress.scoped_allow as [{"hosts": "api.partner.test"}, {"hosts": ["api.partner.test"], "labels": ["x"]}]
}
