from gateway.store.store import Store, StoreError
from gateway.store import decisions as _decisions  # noqa: F401 - registers the decision-log tables
from gateway.store import packages as _packages  # noqa: F401 - registers the package firewall's tables

__all__ = ["Store", "StoreError"]
