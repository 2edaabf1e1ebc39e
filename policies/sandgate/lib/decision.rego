# The shipped combination of an entry package's partial sets into its `decision`:
# any deny -> deny, else any ask -> ask, else any allow -> allow, else deny ("no rule allows this").
package sandgate.lib.decision

import rego.v1

combine(deny, ask, allow) := _result("deny", deny) if {
	count(deny) > 0
} else := _with_ttl(_result("ask", ask), ask) if {
	count(ask) > 0
} else := _result("allow", allow) if {
	count(allow) > 0
} else := {"action": "deny", "reasons": ["no rule allows this"], "codes": ["policy.default_deny"]}

# Reasons in the order of their codes (then by text), each once: where every code has one reason, the i-th
# reason is the i-th code's (the approval page shows each code beside its reason).
_result(action, items) := {
	"action": action,
	"reasons": _reasons_by_code(items),
	"codes": sort({item.code | some item in items}),
}

_reasons_by_code(items) := [pair[1] |
	pairs := sort({[item.code, item.reason] | some item in items})
	some i, pair in pairs
	not _said_before(pairs, i)
]

_said_before(pairs, i) if {
	some j, earlier in pairs
	j < i
	earlier[1] == pairs[i][1]
}

_with_ttl(result, items) := object.union(result, {"ttl_s": min(ttls)}) if {
	ttls := {item.ttl_s | some item in items; is_number(item.ttl_s)}
	count(ttls) > 0
} else := result
