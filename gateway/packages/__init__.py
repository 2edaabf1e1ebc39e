"""The package firewall: OSV malicious-package records, an in-memory index per replica, package downloads and
index documents recognised on registry hosts (PyPI, npm and their mirrors)."""
