from gateway.store.store import Store, StoreError
from gateway.store import decisions as _decisions  # noqa: F401 - registers the decision-log tables

__all__ = ["Store", "StoreError"]
