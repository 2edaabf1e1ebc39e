"""The gates: one decision path per kind of action, whatever protocol asked.

A gate takes a plain request object and returns an outcome; the approval flow, audit, counters and fail-closed
behaviour are inside it. Adapters (the HTTP API, the PostgreSQL gateway, the mitmproxy addons) translate their
wire format to the request and the outcome back, and do nothing else. Gates sit between the adapters and the
services they use (sessions, approvals, audit, policy); they import neither aiohttp nor mitmproxy.
"""
