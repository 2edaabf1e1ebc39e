# Allowlist matching for egress policies: the Rego twin of gateway/net/hosts.py.
#
# An entry is the canonical text of gateway.net.hosts.AllowEntry: "pypi.org" (any port),
# "example.com:8443" (one port), "*.github.com" (subdomains, not the apex), "[::1]:443" or "[::1]"
# (a bare "::1" is read as IPv6 on any port). host is the normalised request host (lower-case,
# no trailing dot, IPv6 without brackets) and port an integer. No net.* builtins (regopy lacks them).
package sandgate.lib.hosts

import rego.v1

default allowlisted(_, _, _) := false

# allowlisted is true when any entry matches host and port. It runs on every request, so instead of parsing
# each entry it lists the few entry texts that would match this host and port (`forms`) and looks them up:
# entries compare in their canonical form, as sandgate writes a session's list (lower case, port without
# leading zeros, IPv6 in brackets when it has a port; base_allow in data must be written so too).
# entry_matches below is the entry-by-entry definition, for any spelling.
allowlisted(entries, host, port) if {
	is_array(entries)
	some form in forms(host, port)
	form in entries
}

# forms: every canonical entry text that matches host and port.
forms(host, port) := names | port_forms(names, port) if {
	is_string(host)
	host != ""
	names := host_patterns(host)
}

# host_patterns: the host itself, and "*.suffix" for each proper suffix (never the apex); IPv6 also bracketed.
host_patterns(host) := {host, concat("", ["[", host, "]"])} if {
	contains(host, ":")
} else := {host} | {concat("", ["*", substring(host, i, -1)]) |
	some i in indexof_n(host, ".")
	i > 0
}

port_forms(names, port) := {concat(":", [n, format_int(port, 10)]) |
	some n in names
	not bare_ipv6(n)
} if {
	is_number(port)
	port == round(port)
	port >= 1
	port <= 65535
} else := set()

bare_ipv6(name) if {
	contains(name, ":")
	not startswith(name, "[")
}

default entry_matches(_, _, _) := false

# entry_matches is true when the one entry matches host and port.
entry_matches(entry, host, port) if {
	is_string(entry)
	is_string(host)
	parsed := parse_entry(lower(entry))
	port_matches(parsed.port, port)
	pattern_matches(parsed.host, host)
}

# parse_entry splits entry text into {"host": string, "port": number or "any"};
# undefined (so no match) when the text is malformed.
parse_entry(entry) := {"host": h, "port": p} if {
	startswith(entry, "[")
	close := indexof(entry, "]")
	close > 1
	h := substring(entry, 1, close - 1)
	p := bracket_port(substring(entry, close + 1, -1))
}

parse_entry(entry) := {"host": entry, "port": "any"} if {
	not startswith(entry, "[")
	count(split(entry, ":")) > 2
}

parse_entry(entry) := {"host": parts[0], "port": port_number(parts[1])} if {
	not startswith(entry, "[")
	parts := split(entry, ":")
	count(parts) == 2
}

parse_entry(entry) := {"host": entry, "port": "any"} if {
	not startswith(entry, "[")
	not contains(entry, ":")
}

bracket_port(rest) := "any" if rest == ""

bracket_port(rest) := port_number(trim_prefix(rest, ":")) if startswith(rest, ":")

port_number(text) := n if {
	regex.match(`^[0-9]{1,5}$`, text)
	n := to_number(text)
	n >= 1
	n <= 65535
}

port_matches("any", port) if is_number(port)

port_matches(want, port) if {
	is_number(want)
	want == port
}

# pattern_matches: "*.suffix" matches strict subdomains of suffix; anything else matches exactly.
pattern_matches(pattern, host) if {
	startswith(pattern, "*.")
	suffix := trim_prefix(pattern, "*")
	endswith(host, suffix)
	count(host) > count(suffix)
}

pattern_matches(pattern, host) if {
	not startswith(pattern, "*.")
	pattern == host
}
