from gateway.store.store import Store, StoreError
from gateway.store import decisions as _decisions  # noqa: F401 - registers the decision-log tables
from gateway.store import packages as _packages  # noqa: F401 - registers the package firewall's tables
from gateway.store import oauth2 as _oauth2  # noqa: F401 - registers the OAuth2 secrets' table
from gateway.store import outbox as _outbox  # noqa: F401 - registers the notification outbox

__all__ = ["Store", "StoreError"]
