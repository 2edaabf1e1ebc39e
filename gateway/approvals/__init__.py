"""Approvals: the pure rules (rules), the binding index (index), the durable queue service (queue)."""
