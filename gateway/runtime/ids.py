"""Random ids for decisions and tool calls from the OS's CSPRNG, read 4 KiB at a time.

`os.urandom` (and `secrets`, built on it) is one `getrandom` system call per id, and CPython gives up the GIL
around it. On the loop thread, with the store's and the decision log's threads waiting for the GIL, each
release let one of them in: two per tool call cost about 8% of the tool-call rate (measured with
tests/bench/toolcalls.py). Ids are sliced from a buffer instead; a forked child starts a buffer of its own.
"""
from __future__ import annotations

import os
import threading

_CHUNK = 4096


class RandomIds:
    def __init__(self, chunk: int = _CHUNK):
        self._chunk = chunk
        self._lock = threading.Lock()
        self._buf = b""
        self._at = 0

    def reset(self) -> None:
        self._lock = threading.Lock()
        self._buf, self._at = b"", 0

    def hex(self, nbytes: int) -> str:
        """`nbytes` random bytes as 2 * nbytes hex digits (as `secrets.token_hex(nbytes)`)."""
        with self._lock:
            at = self._at
            if at + nbytes > len(self._buf):
                self._buf, at = os.urandom(max(self._chunk, nbytes)), 0
            self._at = at + nbytes
            return self._buf[at:at + nbytes].hex()


IDS = RandomIds()
os.register_at_fork(after_in_child=IDS.reset)


def random_hex(nbytes: int) -> str:
    return IDS.hex(nbytes)
