# MCP tools, called through `sandgate mcp`: input.mcp = {"server", "annotations", "untrusted": ["annotations"]}
# (and "listing": true when the proxy only asks which tools to show; args are then empty).
#
# An MCP tool is an unknown tool: it asks, unless data.sandgate.config.toolcall.mcp_allow lists it as
# "SERVER/TOOL" (globs on each side of the first "/": "github/*", "*/read_*"); then it is allowed.
# data.sandgate.config.toolcall.mcp_deny (same form) denies, which also hides the tool from tools/list.
# The server name is the harness's (`--name`); annotations come from the server and are never trusted to allow:
# a readOnlyHint does not turn an ask into an allow. A frozen session asks for every MCP tool (its effects are
# unknown), and a call without a server or tool name is denied.
package sandgate.toolcall

import rego.v1

default mcp_allow_patterns := []

mcp_allow_patterns := data.sandgate.config.toolcall.mcp_allow

default mcp_deny_patterns := []

mcp_deny_patterns := data.sandgate.config.toolcall.mcp_deny

mcp_call if is_object(input.mcp)

mcp_named if {
	is_string(input.mcp.server)
	input.mcp.server != ""
	is_string(input.tool.name)
	input.tool.name != ""
}

mcp_id := concat("/", [input.mcp.server, input.tool.name]) if mcp_named

# "SERVER_GLOB/TOOL_GLOB": no delimiters, so "*" also spans "." and "/" inside a tool name.
mcp_listed(patterns) if {
	mcp_named
	some pattern in patterns
	is_string(pattern)
	cut := indexof(pattern, "/")
	cut > 0
	glob.match(substring(pattern, 0, cut), null, input.mcp.server)
	glob.match(substring(pattern, cut + 1, -1), null, input.tool.name)
}

# METADATA
# title: Malformed MCP call
# description: An MCP tool call without a server or tool name.
# custom:
#   code: toolcall.mcp_malformed
deny contains item if {
	mcp_call
	not mcp_named
	item := {"code": "toolcall.mcp_malformed", "reason": "an MCP tool call needs a server and a tool name"}
}

# METADATA
# title: MCP tool denied
# description: The tool is listed in mcp_deny (also hidden from tools/list).
# custom:
#   code: toolcall.mcp_denied
deny contains item if {
	mcp_call
	mcp_listed(mcp_deny_patterns)
	item := {"code": "toolcall.mcp_denied", "reason": concat("", ["MCP tool ", mcp_id, " is denied (mcp_deny)"])}
}

# METADATA
# title: MCP tool not listed
# description: An MCP tool not in mcp_allow needs approval.
# custom:
#   code: toolcall.mcp_unlisted
ask contains item if {
	mcp_call
	mcp_named
	not mcp_listed(mcp_allow_patterns)
	item := {"code": "toolcall.mcp_unlisted", "reason": concat("", ["MCP tool ", mcp_id, " is not in mcp_allow"])}
}

# METADATA
# title: Frozen session, MCP tool
# description: A frozen session asks for every MCP tool call.
# custom:
#   code: toolcall.mcp_frozen
ask contains item if {
	mcp_call
	input.session.frozen == true
	item := {"code": "toolcall.mcp_frozen", "reason": "the session is frozen: every MCP tool call needs approval"}
}

# METADATA
# title: MCP tool allowed
# description: The tool is listed in mcp_allow.
# custom:
#   code: toolcall.mcp_allowed
allow contains item if {
	mcp_call
	mcp_listed(mcp_allow_patterns)
	item := {"code": "toolcall.mcp_allowed", "reason": concat("", ["MCP tool ", mcp_id, " is in mcp_allow"])}
}
