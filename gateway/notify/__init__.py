"""Notifications: approval events POSTed to `notify.webhook_url` from the store's outbox (gateway/store/outbox.py)."""
