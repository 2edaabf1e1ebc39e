"""Sessions: the request spec and its pure rules (spec), the registry service (registry), a session's tool-call
memory (memory)."""
