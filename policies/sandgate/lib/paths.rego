# Judging path facts (gateway/toolcalls/paths.py: describe_path) for the tool-call policy.
#
# A path fact is {"raw", "normalized", "in_workspace", "is_root", "is_home", "is_workspace_parent",
# "dynamic", "glob", "device", "via_link"}; a glob is already judged by the directory it expands in and a
# path through a symbolic link by where it lands. A missing field counts as unknown: it never makes a
# path "inside the workspace".
package sandgate.lib.paths

import rego.v1

# wipe_problem is the code for removing p when that wipes a device, the root, a home or a parent of the
# workspace; undefined otherwise.
wipe_problem(p) := "toolcall.device" if {
	object.get(p, "device", false) == true
} else := "toolcall.delete_root" if {
	object.get(p, "is_root", false) == true
} else := "toolcall.delete_home" if {
	object.get(p, "is_home", false) == true
} else := "toolcall.delete_workspace_parent" if {
	object.get(p, "is_workspace_parent", false) == true
}

# delete_problem is wipe_problem, or "toolcall.delete_outside_workspace" for a known path outside it.
delete_problem(p) := code if {
	code := wipe_problem(p)
} else := "toolcall.delete_outside_workspace" if {
	known(p)
	not inside(p)
}

# known: the path is known before the command runs.
known(p) if object.get(p, "dynamic", true) == false

# inside: the path is in the workspace.
inside(p) if object.get(p, "in_workspace", false) == true

# problem_text says why, after the path.
problem_text := {
	"toolcall.device": " is a block device or kernel interface",
	"toolcall.delete_root": " is the root directory",
	"toolcall.delete_home": " is a home directory",
	"toolcall.delete_workspace_parent": " is a parent of the workspace",
	"toolcall.delete_outside_workspace": " is outside the workspace",
}

# shown is how a path appears in reasons: as written, and where a link took it.
shown(p) := sprintf("%s (through %s)", [object.get(p, "raw", "?"), p.via_link]) if {
	object.get(p, "via_link", "") != ""
} else := object.get(p, "raw", "?")
