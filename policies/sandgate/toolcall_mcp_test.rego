package sandgate.toolcall_mcp_test

import rego.v1

import data.sandgate.toolcall

mcp_input(server, tool) := {
	"kind": "toolcall",
	"session": {"id": "s_1", "workload": "ephemeral", "frozen": false},
	"tool": {"name": tool, "args": {}},
	"mcp": {"server": server, "annotations": {}, "untrusted": ["annotations"]},
}

codes(set) := {item.code | some item in set}

test_unlisted_tool_asks if {
	codes(toolcall.ask) == {"toolcall.mcp_unlisted"} with input as mcp_input("github", "create_issue")
	count(toolcall.allow) == 0 with input as mcp_input("github", "create_issue")
}

test_listed_tool_allowed if {
	inp := mcp_input("github", "list_issues")
	codes(toolcall.allow) == {"toolcall.mcp_allowed"} with input as inp
		with data.sandgate.config.toolcall.mcp_allow as ["github/list_*"]
	count(toolcall.ask) == 0 with input as inp with data.sandgate.config.toolcall.mcp_allow as ["github/list_*"]
}

test_glob_does_not_cross_servers if {
	inp := mcp_input("git", "hub/list_issues")
	count(toolcall.allow) == 0 with input as inp with data.sandgate.config.toolcall.mcp_allow as ["github/*"]
	codes(toolcall.ask) == {"toolcall.mcp_unlisted"} with input as inp
		with data.sandgate.config.toolcall.mcp_allow as ["github/*"]
}

test_star_tool_glob_spans_dots if {
	codes(toolcall.allow) == {"toolcall.mcp_allowed"} with input as mcp_input("fs", "read.file")
		with data.sandgate.config.toolcall.mcp_allow as ["fs/*"]
}

test_pattern_without_slash_lists_nothing if {
	count(toolcall.allow) == 0 with input as mcp_input("fs", "read") with data.sandgate.config.toolcall.mcp_allow as ["fs"]
}

test_read_only_hint_does_not_allow if {
	inp := object.union(mcp_input("fs", "read"), {"mcp": {"server": "fs", "annotations": {"readOnlyHint": true}}})
	count(toolcall.allow) == 0 with input as inp
	codes(toolcall.ask) == {"toolcall.mcp_unlisted"} with input as inp
}

test_denied_tool_denied if {
	inp := mcp_input("shell", "exec")
	codes(toolcall.deny) == {"toolcall.mcp_denied"} with input as inp
		with data.sandgate.config.toolcall.mcp_deny as ["shell/*"]
		with data.sandgate.config.toolcall.mcp_allow as ["shell/*"]
}

test_frozen_session_asks_even_when_listed if {
	inp := object.union(mcp_input("fs", "read"), {"session": {"frozen": true}})
	codes(toolcall.ask) == {"toolcall.mcp_frozen"} with input as inp with data.sandgate.config.toolcall.mcp_allow as ["fs/*"]
}

test_missing_server_denied if {
	codes(toolcall.deny) == {"toolcall.mcp_malformed"} with input as mcp_input("", "read")
	codes(toolcall.deny) == {"toolcall.mcp_malformed"} with input as mcp_input("fs", "")
	inp := object.remove(mcp_input("fs", "read"), ["tool"])
	codes(toolcall.deny) == {"toolcall.mcp_malformed"} with input as inp
}

# The MCP rules add nothing to a call that did not come through the MCP proxy (the name-based rules of
# toolcall.rego judge it).
test_not_mcp_adds_nothing if {
	inp := object.remove(mcp_input("fs", "read"), ["mcp"])
	all_codes := codes((toolcall.deny | toolcall.ask) | toolcall.allow) with input as inp
	count(all_codes) > 0
	count({code | some code in all_codes; startswith(code, "toolcall.mcp")}) == 0
}
