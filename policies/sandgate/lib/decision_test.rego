package sandgate.lib.decision_test

import rego.v1

import data.sandgate.lib.decision

d(code) := {"code": code, "reason": concat(" ", ["because", code])}

test_deny_beats_ask_and_allow if {
	r := decision.combine({d("x.deny")}, {d("x.ask")}, {d("x.allow")})
	r == {"action": "deny", "reasons": ["because x.deny"], "codes": ["x.deny"]}
}

test_ask_beats_allow if {
	r := decision.combine(set(), {d("x.ask")}, {d("x.allow")})
	r == {"action": "ask", "reasons": ["because x.ask"], "codes": ["x.ask"]}
}

test_allow_when_only_allow if {
	r := decision.combine(set(), set(), {d("x.b"), d("x.a")})
	r == {"action": "allow", "reasons": ["because x.a", "because x.b"], "codes": ["x.a", "x.b"]}
}

test_deny_when_nothing if {
	r := decision.combine(set(), set(), set())
	r == {"action": "deny", "reasons": ["no rule allows this"], "codes": ["policy.default_deny"]}
}

test_ask_ttl_is_the_smallest if {
	r := decision.combine(set(), {object.union(d("x.a"), {"ttl_s": 600}), object.union(d("x.b"), {"ttl_s": 60}), d("x.c")}, set())
	r.action == "ask"
	r.ttl_s == 60
	r.codes == ["x.a", "x.b", "x.c"]
}

test_ask_non_numeric_ttl_ignored if {
	r := decision.combine(set(), {object.union(d("x.a"), {"ttl_s": "soon"})}, set())
	not "ttl_s" in object.keys(r)
}

test_deny_items_with_same_code_are_listed_once if {
	r := decision.combine({d("x.a"), {"code": "x.a", "reason": "other"}}, set(), set())
	r.codes == ["x.a"]
	r.reasons == ["because x.a", "other"]
}

test_reasons_follow_their_codes_order if {
	r := decision.combine(set(), {{"code": "x.a", "reason": "zz: the first code's"}, {"code": "x.b", "reason": "aa: the second code's"}}, set())
	r.codes == ["x.a", "x.b"]
	r.reasons == ["zz: the first code's", "aa: the second code's"]
}

test_a_reason_given_by_two_rules_is_listed_once if {
	r := decision.combine({{"code": "x.b", "reason": "same"}, {"code": "x.a", "reason": "same"}, d("x.c")}, set(), set())
	r.codes == ["x.a", "x.b", "x.c"]
	r.reasons == ["same", "because x.c"]
}
