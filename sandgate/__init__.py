"""sandgate's harness SDK. `from sandgate.client import Client` (async) or `from sandgate.sync import SyncClient`."""
