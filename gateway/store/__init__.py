from gateway.store.store import Store, StoreError

__all__ = ["Store", "StoreError"]
