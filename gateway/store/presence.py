"""Which sandgate processes have a SQLite store open: every `serve` process holds a shared POSIX lock on a file
beside the database for as long as it runs, and asks whether it is alone by trying, without waiting, to make
that lock exclusive (and making it shared again at once). The kernel drops a dead process's lock, so a crash
never leaves a stale claim behind.

A process that is alone is the store's only writer and may keep what it wrote in memory (a session's tool-call
memory, gateway/sessions/memory.py); one that is not must read the store, since another process writes too.
Asking is a system call that gives up the GIL, so `serve` asks from a background task every 0.2 s
(app.PRESENCE_POLL_S), never on a request; a process that joins takes its lock first and, when it is not
alone, waits three polls before it writes anything, so the others have stopped keeping memory by then.
"""
from __future__ import annotations

import fcntl
import os


class Presence:
    def __init__(self) -> None:
        self._fd: int | None = None

    def join(self, database: str) -> None:
        """Hold the shared lock beside `database` (a file path) from now until close()."""
        fd = os.open(database + ".sandgate-lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.lockf(fd, fcntl.LOCK_SH)      # waits only while another process is asking (an instant)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def alone(self) -> bool:
        """Whether no other process holds the lock (True when this one never joined)."""
        fd = self._fd
        if fd is None:
            return True
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False                        # another process holds it: our shared lock is unchanged
        fcntl.lockf(fd, fcntl.LOCK_SH)
        return True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
