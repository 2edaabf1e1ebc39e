"""Random ids sliced from a CSPRNG buffer (gateway/runtime/ids.py): the shape of secrets.token_hex, never repeated, not
shared by threads or by a forked child."""
from __future__ import annotations

import os
import re
import threading

from gateway.runtime.ids import IDS, RandomIds, random_hex


def test_shape_and_no_repeats_across_refills():
    ids = RandomIds(chunk=64)                        # a refill every 4 ids of 16 bytes
    seen = [ids.hex(16) for _ in range(5000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in seen)
    assert len(set(seen)) == len(seen)
    assert re.fullmatch(r"[0-9a-f]{16}", random_hex(8))
    assert len(RandomIds(chunk=4).hex(10)) == 20     # an id longer than the chunk


def test_threads_never_get_the_same_id():
    got: list[str] = []
    lock = threading.Lock()

    def take():
        mine = [IDS.hex(8) for _ in range(2000)]
        with lock:
            got.extend(mine)
    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == len(got) == 16000


def test_a_forked_child_does_not_repeat_the_parents_ids():
    random_hex(8)                                    # the parent has a buffer
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                     # the child: what the parent takes next, it must not take
        os.write(write, "".join(random_hex(8) for _ in range(100)).encode())
        os._exit(0)
    os.close(write)
    parent = {random_hex(8) for _ in range(100)}
    os.waitpid(pid, 0)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    child = {data[i:i + 16].decode() for i in range(0, len(data), 16)}
    assert len(child) == 100 and not (child & parent)
