"""Audit: the batched audit log service (log) and the pure row shaping (rows)."""
