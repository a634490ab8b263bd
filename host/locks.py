"""An exclusive lock on a file, waited for a while: model-sync's download directory, the swap's one
transaction per host and prewarm's copy into a directory each take one, and the swap's reload after its
result takes the plan file's for a moment to know that no step still reads the host. Standard library only."""

from __future__ import annotations

import fcntl
import time
from collections.abc import Callable
from typing import IO


def take_lock(
    handle: IO[str], wait: float = 0, poll: float = 1, waiting: Callable[[float], None] = lambda _waited: None
) -> bool:
    """Lock `handle` (flock, exclusive), trying again every `poll` s for up to `wait` s; False when another
    process still holds it. `waiting` is told the seconds waited so far before each pause."""
    waited = 0.0
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if waited >= wait:
                return False
            waiting(waited)
            time.sleep(poll)
            waited += poll
