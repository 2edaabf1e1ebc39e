package sandgate.lib.hosts_test

import rego.v1

import data.sandgate.lib.hosts

test_allow_exact_host_any_port if {
	hosts.entry_matches("pypi.org", "pypi.org", 443)
	hosts.entry_matches("pypi.org", "pypi.org", 8080)
}

test_deny_exact_host_other_name if hosts.entry_matches("pypi.org", "evil-pypi.org", 443) == false

test_deny_exact_host_subdomain if hosts.entry_matches("pypi.org", "files.pypi.org", 443) == false

test_allow_pinned_port if hosts.entry_matches("example.com:8443", "example.com", 8443)

test_deny_pinned_other_port if hosts.entry_matches("example.com:8443", "example.com", 443) == false

test_allow_wildcard_subdomain if {
	hosts.entry_matches("*.github.com", "api.github.com", 443)
	hosts.entry_matches("*.github.com", "a.b.github.com", 443)
}

test_deny_wildcard_apex if hosts.entry_matches("*.github.com", "github.com", 443) == false

test_deny_wildcard_lookalike if hosts.entry_matches("*.github.com", "evilgithub.com", 443) == false

test_deny_wildcard_suffix_in_middle if hosts.entry_matches("*.github.com", "github.com.evil.test", 443) == false

test_allow_wildcard_with_port if hosts.entry_matches("*.github.com:443", "api.github.com", 443)

test_deny_wildcard_with_other_port if hosts.entry_matches("*.github.com:443", "api.github.com", 22) == false

test_allow_bracketed_ipv6_port if hosts.entry_matches("[::1]:443", "::1", 443)

test_deny_bracketed_ipv6_other_port if hosts.entry_matches("[::1]:443", "::1", 8443) == false

test_allow_bracketed_ipv6_any_port if hosts.entry_matches("[2001:db8::1]", "2001:db8::1", 8443)

test_allow_bare_ipv6_any_port if hosts.entry_matches("2001:db8::1", "2001:db8::1", 22)

test_deny_ipv6_other_address if hosts.entry_matches("[::1]:443", "::2", 443) == false

test_allow_ipv4_with_port if hosts.entry_matches("10.0.0.1:5432", "10.0.0.1", 5432)

test_deny_ipv4_prefix_is_not_a_match if hosts.entry_matches("10.0.0.1", "10.0.0.10", 80) == false

test_deny_malformed_port if {
	hosts.entry_matches("example.com:0", "example.com", 0) == false
	hosts.entry_matches("example.com:99999", "example.com", 99999) == false
	hosts.entry_matches("example.com:https", "example.com", 443) == false
	hosts.entry_matches("example.com:", "example.com", 443) == false
}

test_deny_malformed_brackets if {
	hosts.entry_matches("[::1", "::1", 443) == false
	hosts.entry_matches("[::1]443", "::1", 443) == false
	hosts.entry_matches("[]:443", "", 443) == false
}

test_deny_non_string_arguments if {
	hosts.entry_matches(42, "example.com", 443) == false
	hosts.entry_matches("example.com", null, 443) == false
	hosts.entry_matches("example.com", "example.com", "443") == false
}

test_allow_allowlisted_any_entry if hosts.allowlisted(["pypi.org", "*.github.com"], "api.github.com", 443)

test_deny_allowlisted_no_entry if hosts.allowlisted(["pypi.org", "*.github.com"], "github.com", 443) == false

test_deny_allowlisted_empty if hosts.allowlisted([], "pypi.org", 443) == false
